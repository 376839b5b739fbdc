//! A length-delimited echo server on packetpipe's `Framed`: every frame (a 4-byte
//! big-endian length, then the payload) comes back as it came, a burst of frames with one flush
//! and one vectored write.
//!
//! ```text
//! cargo run --release --features tokio --example echo_server -- [ADDR] [--transport epoll|uring]
//! ```
//!
//! Listens on ADDR (default `127.0.0.1:7000`), prints `listening on ADDR` once it accepts, and
//! echoes until killed. `--transport uring` (feature `io-uring`) serves the connections on an
//! io_uring driver: the kernel receives into pooled blocks, the same codec and `forward` echo
//! them; where io_uring is unavailable it says so and serves on epoll. `perf/examples/echo_load.rs` measures it against a tokio-util `Framed` echo
//! server.
#![forbid(unsafe_code)]

use packetpipe::frame::{FrameError, FrameWriter, Framed, Frames, LengthDelimited};
use packetpipe::io::DuplexPipe;
use tokio::net::{TcpListener, TcpStream};

/// Echo every frame `socket` sends until it closes, then close: reading a frame reads the socket
/// and each flush writes it, in this task (the inline transport: no pump, no second task).
pub async fn serve(socket: TcpStream) -> Result<(), FrameError> {
    let _ = socket.set_nodelay(true);
    serve_stream(socket).await
}

/// The same echo over any tokio stream: a `TcpStream`, or a TLS stream over one
/// (`packetpipe::io::tls::TlsStream`, whose records are opened in the reader's blocks).
pub async fn serve_stream<S>(socket: S) -> Result<(), FrameError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let codec = LengthDelimited::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    // Small frames copied out, large ones shared; headers written, payloads appended.
    let (mut out, mut frames) = Framed::new(socket, codec).split();
    out.forward(&mut frames).await?; // a flush whenever no frame is ready
    out.close().await // the client is done: so are we
}

/// The same echo over a connection's pipes, whichever transport fills and drains them.
pub async fn serve_pipes(pipe: DuplexPipe) -> Result<(), FrameError> {
    let codec = LengthDelimited::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    let mut frames = Frames::new(pipe.reader, codec.clone());
    let mut out = FrameWriter::new(pipe.writer, codec);
    out.forward(&mut frames).await?;
    out.close().await
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut addr, mut uring) = ("127.0.0.1:7000".to_string(), false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--transport" => uring = args.next().as_deref() == Some("uring"),
            _ => addr = arg,
        }
    }
    if uring {
        #[cfg(all(feature = "io-uring", target_os = "linux"))]
        match packetpipe::io::uring::Driver::new() {
            Ok(mut driver) => {
                let listener = std::net::TcpListener::bind(&addr)?;
                println!("listening on {} (io_uring)", listener.local_addr()?);
                driver.listen(listener)?;
                return driver.run(|pipe| async {
                    if let Err(e) = serve_pipes(pipe).await {
                        eprintln!("connection ended with {}", with_causes(&e));
                    }
                });
            }
            Err(e) => eprintln!("io_uring is unavailable ({e}): serving on epoll"),
        }
        #[cfg(not(all(feature = "io-uring", target_os = "linux")))]
        eprintln!("built without the io-uring feature: serving on epoll");
    }
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
                    eprintln!("connection ended with {}", with_causes(&e));
                }
            });
        }
    })
}

/// An error with the errors it wraps (`source()`), which its own text leaves out: "the reader
/// completed with an error: the TLS peer sent an alert: ...".
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(error) = cause {
        text += &format!(": {error}");
        cause = error.source();
    }
    text
}
