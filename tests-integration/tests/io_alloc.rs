//! Zero allocations per message in steady state through the duplex connection: a request/response
//! loop over loopback (client, connection pumps and application on one thread, so the per-thread
//! counting allocator sees every allocation the round trip makes).

#![cfg(feature = "tokio")]

mod kit;

use kit::counting_alloc;

use packetpipe::ByteSegments;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: counting_alloc::CountingAlloc = counting_alloc::CountingAlloc;

const WARM_UP: usize = 500;
const MEASURED: usize = 2_000;

fn round_trips_allocate_nothing(request_len: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    runtime.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, server) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (mut client, server) = (client.unwrap(), server.unwrap().0);
        let (mut app, connection) = packetpipe::io::tokio::connection(server);
        tokio::spawn(connection);
        // The application: answer each request (a 4-byte length, then the body) with its body.
        tokio::spawn(async move {
            loop {
                let Ok(result) = app.reader.read_at_least(4).await else {
                    return;
                };
                let mut header = [0; 4];
                result.buffer.copy_prefix_to(&mut header).unwrap();
                let body = u32::from_be_bytes(header) as usize;
                let Ok(result) = app.reader.read_at_least(4 + body).await else {
                    return;
                };
                for chunk in result.buffer.slice(4..4 + body).segments() {
                    app.writer.write_slice(chunk).unwrap();
                }
                app.reader.advance_to(4 + body, 4 + body).unwrap();
                if app.writer.flush_pipe().await.is_err() {
                    return;
                }
            }
        });
        let mut request = (request_len as u32).to_be_bytes().to_vec();
        request.extend((0..request_len).map(|i| i as u8));
        let mut response = vec![0; request_len];
        let mut before = 0;
        for round in 0..WARM_UP + MEASURED {
            if round == WARM_UP {
                before = counting_alloc::allocations();
            }
            client.write_all(&request).await.unwrap();
            client.read_exact(&mut response).await.unwrap();
            assert_eq!(response, request[4..]);
        }
        let allocations = counting_alloc::allocations() - before;
        // The counter does count this thread's allocations.
        let probe = counting_alloc::allocations();
        drop(std::hint::black_box(Vec::<u8>::with_capacity(16)));
        assert_eq!(counting_alloc::allocations(), probe + 1);
        assert_eq!(
            allocations, 0,
            "{allocations} allocations in {MEASURED} round trips of {request_len}-byte messages"
        );
    });
}

#[test]
fn duplex_connection_round_trips_of_64_byte_messages_allocate_nothing() {
    round_trips_allocate_nothing(64);
}

#[test]
fn duplex_connection_round_trips_of_16_kib_messages_allocate_nothing() {
    round_trips_allocate_nothing(16 << 10);
}
