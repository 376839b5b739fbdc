//! Sockets for the I/O tests.

use tokio::net::{TcpListener, TcpStream};

/// A connected pair of loopback TCP sockets: (client, server).
pub async fn socket_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (client.unwrap(), server.unwrap().0)
}
