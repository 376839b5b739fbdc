//! Between a socket and a parser: the pipe ends as standard I/O types, pumps, a duplex connection.

mod buf_mut;
