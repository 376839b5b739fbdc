//! The accept loop: one current-thread tokio runtime, every connection a local task sharing one
//! key space (single-threaded, as `redis-server` is), and a [`ServerHandle`] that runs a server
//! on its own thread for tests and benchmarks.

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use super::session::Shared;
use super::store::{Stats, Store};
use super::{pipe_server, tokio_util_server, Config};

/// Which buffer layer serves the connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    /// packetpipe's duplex connection ([`pipe_server`]).
    Pipe,
    /// tokio-util's `Framed` ([`tokio_util_server`]).
    TokioUtil,
}

/// Accept connections on `listener` until `shutdown` resolves, serving each with `serve` as a
/// local task (call within a `LocalSet`).
pub async fn accept_loop<V, S, F>(
    listener: TcpListener,
    store: Shared<V>,
    config: Config,
    serve: S,
    shutdown: impl Future<Output = ()>,
) where
    V: super::store::Value + 'static,
    S: Fn(TcpStream, Shared<V>, Config) -> F,
    F: Future<Output = ()> + 'static,
{
    let accept = async {
        loop {
            match listener.accept().await {
                Ok((socket, _)) => {
                    tokio::task::spawn_local(serve(socket, store.clone(), config));
                }
                Err(e) => {
                    // Out of file descriptors, say: the connections that exist go on.
                    eprintln!("accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    };
    // Whichever ends first ends the server: the accept and eviction loops only end with it. (A
    // `poll_fn` rather than `tokio::select!`, so that the examples need no proc-macro build.)
    let mut accept = std::pin::pin!(accept);
    let mut evict = std::pin::pin!(evict_idle_blocks());
    let mut shutdown = std::pin::pin!(shutdown);
    std::future::poll_fn(|cx| {
        let ended = accept.as_mut().poll(cx).is_ready()
            || evict.as_mut().poll(cx).is_ready()
            || shutdown.as_mut().poll(cx).is_ready();
        if ended {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

/// Once a second, let the global pool free the blocks it has kept unused for its idle time
/// (`PoolOptions::idle_eviction`, 5 s by default): after a burst of connections (or an attack)
/// ends, the memory goes back to the system instead of staying cached. The pool does this by
/// itself only while it is in use (on its slow paths); an idle server runs none of them.
async fn evict_idle_blocks() {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        packetpipe::Pool::global().evict_idle();
    }
}

/// Serve connections of `flavor` on `listener` (a fresh key space, counted in `stats`) until
/// `shutdown` resolves; call within a `LocalSet`.
pub async fn serve(
    flavor: Flavor,
    listener: TcpListener,
    config: Config,
    stats: Arc<Stats>,
    shutdown: impl Future<Output = ()>,
) {
    match flavor {
        Flavor::Pipe => {
            let store = Rc::new(RefCell::new(Store::new(stats)));
            accept_loop(listener, store, config, pipe_server::serve, shutdown).await;
        }
        Flavor::TokioUtil => {
            let store = Rc::new(RefCell::new(Store::new(stats)));
            accept_loop(listener, store, config, tokio_util_server::serve, shutdown).await;
        }
    }
}

/// How long a client has to complete the TLS handshake: one that stalls it is dropped, so it
/// holds a socket and a task for no longer than this.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The TLS acceptor of the PEM certificate chain and private key in `files`.
#[cfg(feature = "tls")]
pub fn load_tls(files: &super::TlsFiles) -> std::io::Result<packetpipe::io::tls::TlsAcceptor> {
    use packetpipe::io::tls::rustls;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    let invalid = |what: &str, e: &dyn std::fmt::Display| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{what}: {e}"))
    };
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(&files.cert, &e))?;
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| invalid(&files.key, &e))?;
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| invalid(&files.cert, &e))?;
    Ok(packetpipe::io::tls::TlsAcceptor::from(Arc::new(config)))
}

/// Serve TLS connections on `listener` with packetpipe's pipes (a fresh key space, counted in
/// `stats`) until `shutdown` resolves; call within a `LocalSet`.
#[cfg(feature = "tls")]
pub async fn serve_tls(
    listener: TcpListener,
    config: Config,
    stats: Arc<Stats>,
    acceptor: packetpipe::io::tls::TlsAcceptor,
    shutdown: impl Future<Output = ()>,
) {
    let store = Rc::new(RefCell::new(Store::new(stats)));
    let serve = move |socket, store, config| {
        pipe_server::serve_tls(acceptor.clone(), socket, store, config)
    };
    accept_loop(listener, store, config, serve, shutdown).await;
}

/// Run the TLS server (packetpipe's pipes, on the epoll transport) on `listener` on this thread
/// until `shutdown` resolves.
#[cfg(feature = "tls")]
pub fn run_tls(
    listener: std::net::TcpListener,
    config: Config,
    stats: Arc<Stats>,
    acceptor: packetpipe::io::tls::TlsAcceptor,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if config.uring {
        return Err(std::io::Error::other(
            "--tls is served on the epoll transport only",
        ));
    }
    listener.set_nonblocking(true)?;
    let (runtime, local) = local_runtime()?;
    local.block_on(&runtime, async move {
        let listener = TcpListener::from_std(listener)?;
        serve_tls(listener, config, stats, acceptor, shutdown).await;
        Ok(())
    })
}

/// The servers' runtime: one current-thread runtime, and a `LocalSet` for the connections'
/// tasks (they share the key space through an `Rc`).
pub fn local_runtime() -> std::io::Result<(tokio::runtime::Runtime, tokio::task::LocalSet)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    Ok((runtime, tokio::task::LocalSet::new()))
}

/// Run a server of `flavor` on `listener` on this thread until `shutdown` resolves.
pub fn run(
    flavor: Flavor,
    listener: std::net::TcpListener,
    config: Config,
    stats: Arc<Stats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    if config.uring && flavor != Flavor::Pipe {
        return Err(std::io::Error::other(
            "--transport uring serves packetpipe's pipes only",
        ));
    }
    #[cfg(all(feature = "io-uring", target_os = "linux"))]
    if config.uring {
        let driver =
            packetpipe::io::uring::Driver::with_options(packetpipe::io::uring::DriverOptions {
                connection: pipe_server::connection_options(),
                ..Default::default()
            });
        match driver {
            Ok(driver) => return run_uring(driver, listener, config, stats, shutdown),
            Err(e) => eprintln!("io_uring is unavailable ({e}): serving on the epoll transport"),
        }
    }
    #[cfg(not(all(feature = "io-uring", target_os = "linux")))]
    if config.uring {
        eprintln!("built without the io-uring feature: serving on the epoll transport");
    }
    listener.set_nonblocking(true)?;
    let (runtime, local) = local_runtime()?;
    local.block_on(&runtime, async move {
        let listener = TcpListener::from_std(listener)?;
        serve(flavor, listener, config, stats, shutdown).await;
        Ok(())
    })
}

/// The pipe server on an io_uring driver on this thread: every connection's session a future the
/// driver polls, sharing one key space.
#[cfg(all(feature = "io-uring", target_os = "linux"))]
fn run_uring(
    mut driver: packetpipe::io::uring::Driver,
    listener: std::net::TcpListener,
    config: Config,
    stats: Arc<Stats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    driver.listen(listener)?;
    let handle = driver.handle();
    // The shutdown future is awaited on a thread of its own; it stops the driver.
    std::thread::spawn(move || {
        futures::executor::block_on(shutdown);
        handle.shutdown();
    });
    let store: Shared<packetpipe::PacketChain> = Rc::new(RefCell::new(Store::new(stats)));
    driver.run(|pipe| pipe_server::serve_pipe(pipe, store.clone(), config))
}

/// The examples' `main`: `[ADDR] [--max-request BYTES] [--transport epoll|uring] [--tls CERT
/// KEY]`, `listening on ADDR` once bound, then serve until killed.
pub fn main(flavor: Flavor) {
    let (addr, config, tls) = match Config::from_args() {
        Ok(parsed) => parsed,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    if tls.is_some() && config.uring {
        eprintln!("--tls is served on the epoll transport only, not with --transport uring");
        std::process::exit(2);
    }
    if tls.is_some() && flavor != Flavor::Pipe {
        eprintln!("--tls serves packetpipe's pipes only");
        std::process::exit(2);
    }
    #[cfg(not(feature = "tls"))]
    if tls.is_some() {
        eprintln!("built without feature tls: --tls needs `--features tls`");
        std::process::exit(2);
    }
    #[cfg(feature = "tls")]
    let acceptor = tls.as_ref().map(|files| match load_tls(files) {
        Ok(acceptor) => acceptor,
        Err(e) => {
            eprintln!("cannot load the TLS certificate and key: {e}");
            std::process::exit(2);
        }
    });
    let listener = match std::net::TcpListener::bind(&addr) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {addr}: {e}");
            std::process::exit(1);
        }
    };
    let scheme = if tls.is_some() { " (TLS)" } else { "" };
    match listener.local_addr() {
        Ok(bound) => println!("listening on {bound}{scheme}"),
        Err(_) => println!("listening on {addr}{scheme}"),
    }
    let forever = std::future::pending();
    #[cfg(feature = "tls")]
    let served = match acceptor {
        Some(acceptor) => run_tls(listener, config, Arc::default(), acceptor, forever),
        None => run(flavor, listener, config, Arc::default(), forever),
    };
    #[cfg(not(feature = "tls"))]
    let served = run(flavor, listener, config, Arc::default(), forever);
    if let Err(e) = served {
        eprintln!("server failed: {e}");
        std::process::exit(1);
    }
}

/// A server running on its own thread, on a free loopback port; dropping it stops the server
/// (closing every connection) and joins the thread.
pub struct ServerHandle {
    pub addr: SocketAddr,
    stats: Arc<Stats>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ServerHandle {
    pub fn start(flavor: Flavor, config: Config) -> ServerHandle {
        ServerHandle::start_with(
            format!("{flavor:?} server"),
            move |listener, stats, stop| run(flavor, listener, config, stats, stop),
        )
    }

    /// The TLS server (packetpipe's pipes) with `acceptor`.
    #[cfg(feature = "tls")]
    pub fn start_tls(config: Config, acceptor: packetpipe::io::tls::TlsAcceptor) -> ServerHandle {
        ServerHandle::start_with("TLS server".into(), move |listener, stats, stop| {
            run_tls(listener, config, stats, acceptor, stop)
        })
    }

    /// `run` the server on its own thread, with a listener on a free loopback port, its
    /// statistics and the future that stops it.
    fn start_with<R>(name: String, run: R) -> ServerHandle
    where
        R: FnOnce(
                std::net::TcpListener,
                Arc<Stats>,
                std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
            ) -> std::io::Result<()>
            + Send
            + 'static,
    {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let addr = listener.local_addr().expect("a bound address");
        let stats = Arc::new(Stats::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                let shutdown = Box::pin(async move {
                    let _ = stopped.await;
                });
                run(listener, thread_stats, shutdown).expect("the server runs");
            })
            .expect("spawn the server thread");
        ServerHandle {
            addr,
            stats,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Requests answered so far (published once per batch).
    pub fn requests(&self) -> u64 {
        self.stats.requests.load(Ordering::Relaxed)
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
