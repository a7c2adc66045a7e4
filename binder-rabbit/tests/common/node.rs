//! A RabbitMQ node of a test's own, beside the shared broker (which it never touches): its
//! own name, ports, directories and configuration file; stopped and its directories removed
//! when dropped, even if the test panicked.

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// A running node.
pub struct Node {
    /// `<name>@localhost`.
    pub name: String,
    /// Its plain AMQP port (127.0.0.1).
    pub amqp_port: u16,
    /// Its TLS port (127.0.0.1).
    pub tls_port: u16,
    /// The node's OS process, once up (to kill it if `rabbitmqctl stop` fails).
    pid: Option<String>,
    dir: tempfile::TempDir,
}

/// Whether the RabbitMQ server is installed here; without it a test says so and passes,
/// unless `REQUIRE_RABBIT=1`.
pub fn available() -> bool {
    let found = Command::new("rabbitmqctl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("REQUIRE_RABBIT").as_deref() != Ok("1"),
            "REQUIRE_RABBIT=1 but rabbitmq-server is not installed"
        );
        eprintln!("SKIPPED: rabbitmq-server is not installed");
    }
    found
}

/// Free ports on 127.0.0.1 (held together, so they differ).
fn free_ports<const N: usize>() -> [u16; N] {
    let held: Vec<TcpListener> = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    std::array::from_fn(|i| held[i].local_addr().unwrap().port())
}

/// Makes `path` usable by the `rabbitmq` user the server runs as.
fn open_up(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

impl Node {
    /// Starts a node named `<prefix>-<pid>@localhost` with listeners for plain AMQP and TLS
    /// on 127.0.0.1 and `config` (rabbitmq.conf lines, e.g. `ssl_options.*`) added, and
    /// waits until it is up. `prepare` writes files into the node's directory first (it is
    /// given the directory; the node's user can read what it writes there).
    pub fn start(prefix: &str, prepare: impl FnOnce(&Path) -> String) -> Node {
        let dir = tempfile::tempdir().unwrap();
        open_up(dir.path(), 0o777);
        let config = prepare(dir.path());
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            open_up(&entry.unwrap().path(), 0o644);
        }
        let [amqp_port, tls_port, dist_port] = free_ports::<3>();
        let name = format!("{prefix}-{}@localhost", std::process::id());
        for sub in ["mnesia", "log"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
            open_up(&dir.path().join(sub), 0o777);
        }
        let conf = dir.path().join("rabbitmq.conf");
        std::fs::write(
            &conf,
            format!(
                "listeners.tcp.local = 127.0.0.1:{amqp_port}\n\
                 listeners.ssl.local = 127.0.0.1:{tls_port}\n\
                 {config}\n"
            ),
        )
        .unwrap();
        let plugins = dir.path().join("enabled_plugins");
        std::fs::write(&plugins, "[].\n").unwrap();
        open_up(&conf, 0o644);
        open_up(&plugins, 0o644);
        let mut node = Node {
            name,
            amqp_port,
            tls_port,
            pid: None,
            dir,
        };
        let status = Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &node.name)
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", node.dir.path().join("mnesia"))
            .env("RABBITMQ_LOG_BASE", node.dir.path().join("log"))
            .env("RABBITMQ_PID_FILE", node.dir.path().join("pid"))
            .env("RABBITMQ_CONFIG_FILE", &conf)
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", &plugins)
            .status()
            .expect("rabbitmq-server runs");
        assert!(status.success(), "rabbitmq-server -detached: {status}");
        node.wait_until_up(Duration::from_secs(90));
        node.pid = node.ctl(&["eval", "os:getpid()."]).ok().map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .trim_matches('"')
                .to_owned()
        });
        node
    }

    /// Waits for the node to answer `rabbitmqctl status`; past `limit` the test fails with
    /// the node's log.
    fn wait_until_up(&self, limit: Duration) {
        let started = Instant::now();
        loop {
            let up = self
                .ctl(&["await_startup", "--timeout", "5"])
                .is_ok_and(|o| o.status.success());
            if up {
                return;
            }
            assert!(
                started.elapsed() < limit,
                "node {} did not start within {limit:?}; its log:\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// `rabbitmqctl -q -n <this node> <args>`.
    pub fn ctl(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name])
            .args(args)
            .output()
    }

    /// The node's log so far.
    pub fn log(&self) -> String {
        let path = self
            .dir
            .path()
            .join("log")
            .join(format!("{}.log", self.name));
        std::fs::read_to_string(path).unwrap_or_default()
    }

    /// The node's directory (certificates written by `prepare` are there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let stopped = self.ctl(&["stop"]).is_ok_and(|o| o.status.success());
        if !stopped {
            if let Some(pid) = &self.pid {
                let _ = Command::new("kill").arg(pid).status();
            }
        }
    }
}
