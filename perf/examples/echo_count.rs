//! Instructions per echoed message, for `scripts/echo_instructions.sh`: one echo server alone in a
//! process (to run under `valgrind --tool=callgrind`), and a client that sends a fixed number of
//! messages and exits.
//!
//! ```text
//! cargo build --release -p packetpipe-perf --example echo_count
//! target/release/examples/echo_count serve packetpipe 127.0.0.1:7001   # or `forward`
//! target/release/examples/echo_count client 127.0.0.1:7001 16 1 2000   # connections, outstanding, messages each
//! ```
//!
//! `serve packetpipe` is `examples/echo_server.rs` (`serve packetpipe-keep`: the same on a
//! connection that keeps its blocks while idle); `serve forward` is tokio-util's `Framed` split
//! and forwarded (a burst of frames read at once goes out with one write, as packetpipe's
//! `FrameWriter::forward` does), as in `examples/echo_load.rs`. Both run on a current-thread tokio
//! runtime and print `listening on ADDR`. The client keeps `outstanding` 64-byte frames in flight
//! on each connection, checks every echo byte for byte, and prints how many came back.
#![forbid(unsafe_code)]

#[path = "../../examples/echo_server.rs"]
#[allow(dead_code)] // its `main` is not this one's
mod echo_server;

use bytes::BytesMut;
use futures::{StreamExt, TryStreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};

async fn serve_forward(socket: TcpStream) -> std::io::Result<()> {
    socket.set_nodelay(true)?;
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    let (sink, stream) = Framed::new(socket, codec).split();
    stream.map_ok(BytesMut::freeze).forward(sink).await
}

/// `examples/echo_server.rs`'s echo on a connection that keeps its blocks while idle
/// (`ConnectionOptions::keep_blocks_idle`).
async fn serve_keep(socket: TcpStream) -> Result<(), packetpipe::frame::FrameError> {
    let _ = socket.set_nodelay(true);
    let options = packetpipe::io::ConnectionOptions {
        keep_blocks_idle: true,
        ..Default::default()
    };
    let (app, connection) = packetpipe::io::tokio::connection_with(socket, options);
    let codec = packetpipe::frame::LengthDelimited::builder()
        .max_frame_length(1 << 20)
        .new_codec();
    let (mut out, mut frames) =
        packetpipe::frame::Framed::from_connection(app, connection, codec).split();
    out.forward(&mut frames).await?;
    out.close().await
}

async fn serve(kind: &str, addr: &str) -> std::io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (socket, _) = listener.accept().await?;
        match kind {
            "packetpipe" => drop(tokio::spawn(echo_server::serve(socket))),
            "packetpipe-keep" => drop(tokio::spawn(serve_keep(socket))),
            _ => drop(tokio::spawn(serve_forward(socket))),
        }
    }
}

/// One connection: `outstanding` frames in flight until `messages` have come back.
async fn client(addr: String, outstanding: usize, messages: usize) -> usize {
    let socket = TcpStream::connect(&addr).await.expect("connect");
    socket.set_nodelay(true).expect("nodelay");
    let (mut rx, mut tx) = socket.into_split();
    let mut frame = 64u32.to_be_bytes().to_vec();
    frame.extend([7u8; 64]);
    let mut sent = 0;
    while sent < outstanding.min(messages) {
        tx.write_all(&frame).await.expect("send");
        sent += 1;
    }
    let mut echo = vec![0u8; frame.len()];
    for _ in 0..messages {
        rx.read_exact(&mut echo).await.expect("echo");
        assert_eq!(echo, frame, "the echo differs from the message");
        if sent < messages {
            tx.write_all(&frame).await.expect("send");
            sent += 1;
        }
    }
    messages
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["serve", kind @ ("packetpipe" | "packetpipe-keep" | "forward"), addr] => {
            runtime.block_on(serve(kind, addr)).expect("serve");
        }
        ["client", addr, connections, outstanding, messages] => {
            let parse = |v: &str| v.parse::<usize>().expect("a number");
            let (c, k, m) = (parse(connections), parse(outstanding), parse(messages));
            if k == 0 {
                eprintln!("OUTSTANDING must be at least 1");
                std::process::exit(2);
            }
            let echoed: usize = runtime.block_on(async {
                let clients: Vec<_> = (0..c)
                    .map(|_| tokio::spawn(client(addr.to_string(), k, m)))
                    .collect();
                let mut total = 0;
                for client in clients {
                    total += client.await.expect("client");
                }
                total
            });
            println!("{echoed} messages echoed");
        }
        _ => {
            eprintln!("usage: echo_count serve packetpipe|packetpipe-keep|forward ADDR");
            eprintln!("       echo_count client ADDR CONNECTIONS OUTSTANDING MESSAGES");
            std::process::exit(2);
        }
    }
}
