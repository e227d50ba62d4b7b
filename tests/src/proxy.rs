//! A TCP proxy a test can cut: a network partition between two real processes (an API server
//! and its etcd), without stopping either. It runs on a runtime of its own, so it forwards even
//! while the test's thread blocks (a synchronous health probe, say).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

pub struct Proxy {
    /// Where clients connect instead of the upstream.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<Runtime>,
}

struct Shared {
    cut: AtomicBool,
    conns: Mutex<JoinSet<()>>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("proxy address");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("proxy runtime");
        let shared = Arc::new(Shared {
            cut: AtomicBool::new(false),
            conns: Mutex::new(JoinSet::new()),
        });
        let s = shared.clone();
        runtime.spawn(async move {
            let listener = TcpListener::from_std(listener).expect("proxy listener");
            while let Ok((mut inbound, _)) = listener.accept().await {
                if s.cut.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is refused as soon as it opens
                }
                s.conns.lock().expect("proxy lock").spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Proxy {
            addr,
            shared,
            runtime: Some(runtime),
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Breaks every open connection and refuses new ones until `restore`.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.conns.lock().expect("proxy lock").abort_all();
    }

    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
