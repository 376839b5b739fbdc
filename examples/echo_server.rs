//! A length-delimited echo server on packetpipe's duplex connection: every frame (a 4-byte
//! big-endian length, then the payload) comes back as it came, a burst of frames with one flush
//! and one vectored write.
//!
//! ```text
//! cargo run --release --features tokio --example echo_server -- [ADDR]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:7000`), prints `listening on ADDR` once it accepts, and
//! echoes until killed. `examples/echo_load.rs` measures it against a tokio-util `Framed` echo
//! server.
#![forbid(unsafe_code)]

#[path = "resp/ready_probe.rs"]
mod ready_probe; // a TcpStream whose zero-byte read (the pump's idle wait) costs no system call

use packetpipe::frame::{FrameError, FrameWriter, Frames, LengthDelimited};
use ready_probe::ReadyProbe;
use tokio::net::{TcpListener, TcpStream};

/// Echo every frame `socket` sends until it closes: the socket's pumps and the echo, in one task
/// (`io::join`: a wake of one by the other is a second pass of the same poll).
pub async fn serve(socket: TcpStream) -> Result<(), FrameError> {
    let _ = socket.set_nodelay(true);
    let (app, connection) = packetpipe::io::tokio::connection(ReadyProbe(socket));
    let codec = LengthDelimited::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    let echo = async move {
        let mut frames = Frames::new(app.reader, codec.clone()); // small frames copied out, large shared
        let mut out = FrameWriter::new(app.writer, codec); // headers written, payloads appended
        out.forward(&mut frames).await?; // a flush whenever no frame is ready
        out.into_inner().complete(); // the client is done: so are we
        Ok(())
    };
    packetpipe::io::join(connection, echo).await.1
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(&addr).await?;
        println!("listening on {}", listener.local_addr()?);
        loop {
            let (socket, _) = listener.accept().await?;
            tokio::spawn(serve(socket));
        }
    })
}
