//! A length-delimited echo server on packetpipe's `Framed`: every frame (a 4-byte
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

use packetpipe::frame::{FrameError, Framed, LengthDelimited};
use tokio::net::{TcpListener, TcpStream};

/// Echo every frame `socket` sends until it closes, then close: reading a frame reads the socket
/// and each flush writes it, in this task (the inline transport: no pump, no second task).
pub async fn serve(socket: TcpStream) -> Result<(), FrameError> {
    let _ = socket.set_nodelay(true);
    let codec = LengthDelimited::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    // Small frames copied out, large ones shared; headers written, payloads appended.
    let (mut out, mut frames) = Framed::new(socket, codec).split();
    out.forward(&mut frames).await?; // a flush whenever no frame is ready
    out.close().await // the client is done: so are we
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
            tokio::spawn(async move {
                if let Err(e) = serve(socket).await {
                    eprintln!("connection ended with {e}");
                }
            });
        }
    })
}
