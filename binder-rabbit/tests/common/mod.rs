//! Shared by the tests against the real broker.
#![allow(dead_code)]

use binder_amqp::AmqpBroker;
use binder_core::binder::BinderErrorKind;
use binder_rabbit::{RabbitBinder, RabbitSettings};

/// A subscription's next delivery, which must come within 10 s.
pub async fn next_delivery(
    sub: &mut dyn binder_core::binder::Subscription,
) -> binder_core::binder::Inbound {
    tokio::time::timeout(std::time::Duration::from_secs(10), sub.next())
        .await
        .expect("a delivery within 10 s")
        .expect("the subscription is open")
}

/// The broker the tests use: `AMQP_URL`, by default the local RabbitMQ.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A binder on a broker that answers, or `None` (said loudly) when none does; with
/// `REQUIRE_RABBIT=1` a missing broker fails the test instead.
pub async fn binder() -> Option<RabbitBinder> {
    let binder = RabbitBinder::new(RabbitSettings::from_uri(&amqp_url()));
    match binder.inspect("amq.nonexistent-probe").await {
        Err(e) if e.kind() == BinderErrorKind::Unreachable => {
            assert!(
                std::env::var("REQUIRE_RABBIT").as_deref() != Ok("1"),
                "REQUIRE_RABBIT=1 but no RabbitMQ answers at {}: {e}",
                amqp_url()
            );
            eprintln!("SKIPPED: no RabbitMQ answers at {}: {e}", amqp_url());
            None
        }
        _ => Some(binder),
    }
}

/// A name no other run uses.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}-{}", nanos % 1_000_000_000)
}

/// A raw lapin connection and channel on `AMQP_URL`, as another client would have, with
/// `queue` declared (not durable); the connection must outlive the channel's use.
pub async fn raw_queue(queue: &str) -> (lapin::Connection, lapin::Channel) {
    let conn = lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        queue.into(),
        lapin::options::QueueDeclareOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    (conn, ch)
}

/// Runs `rabbitmqctl -q <args>` against the local broker and returns what it printed; a
/// failure fails the test with rabbitmqctl's own message.
pub fn rabbitmqctl(args: &[&str]) -> String {
    let out = std::process::Command::new("rabbitmqctl")
        .arg("-q")
        .args(args)
        .output()
        .expect("rabbitmqctl is installed with RabbitMQ");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A plan declaring one plain queue (not exclusive, not auto-deleted, no arguments).
pub fn queue_plan(name: &str, durable: bool) -> binder_amqp::topology::TopologyPlan {
    binder_amqp::topology::TopologyPlan {
        queues: vec![binder_amqp::topology::QueueDecl {
            name: name.to_owned(),
            durable,
            exclusive: false,
            auto_delete: false,
            arguments: Default::default(),
        }],
        ..Default::default()
    }
}

/// A producer on the default exchange, which routes by queue name.
pub async fn direct_producer(
    binder: &impl AmqpBroker,
    delivery_mode: binder_core::message::DeliveryMode,
) -> Box<dyn binder_amqp::AmqpProducer> {
    binder
        .producer(binder_amqp::ProducerSpec {
            exchange: String::new(),
            delivery_mode,
        })
        .await
        .unwrap()
}

/// Whether a test that cannot run here must fail (`REQUIRE_RABBIT=1`) rather than skip.
fn required() -> bool {
    std::env::var("REQUIRE_RABBIT").as_deref() == Ok("1")
}

/// A port nothing listens on right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Starts `rabbitmq-server` for a private node whose files `dir` holds (appending its output
/// to `dir/server.out`), without waiting for it to boot.
fn spawn_server(
    name: &str,
    port: u16,
    dist_port: u16,
    dir: &std::path::Path,
) -> Result<std::process::Child, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.out"))
        .map_err(|e| e.to_string())?;
    std::process::Command::new("rabbitmq-server")
        .env("RABBITMQ_NODENAME", name)
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", port.to_string())
        .env("RABBITMQ_DIST_PORT", dist_port.to_string())
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_PID_FILE", dir.join("node.pid"))
        .env(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}",
        )
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .spawn()
        .map_err(|e| format!("rabbitmq-server: {e}"))
}

/// A RabbitMQ node of the test's own, started from the local installation with its own name,
/// AMQP port, distribution port and data directory, on loopback. Tests that raise alarms,
/// close every connection or stop the broker use one, so the shared broker (`AMQP_URL`) and
/// whoever else uses it are never touched. Stopped, and its directory removed, when dropped.
pub struct PrivateNode {
    name: String,
    port: u16,
    /// The TLS listener's port, when the node has one ([`PrivateNode::start_tls`]).
    tls_port: Option<u16>,
    /// The management plugin's HTTP port, when the node has it ([`PrivateNode::start_management`]).
    management_port: Option<u16>,
    dist_port: u16,
    dir: std::path::PathBuf,
    server: std::process::Child,
}

impl PrivateNode {
    /// Starts a node and waits until it has booted, or says why it cannot (and returns
    /// `None`; with `REQUIRE_RABBIT=1` it fails the test instead).
    pub fn start(tag: &str) -> Option<Self> {
        Self::or_skip(Self::try_start(tag))
    }

    /// The node, or `None` said loudly (a failure with `REQUIRE_RABBIT=1`).
    fn or_skip(started: Result<Self, String>) -> Option<Self> {
        match started {
            Ok(node) => Some(node),
            Err(reason) => {
                assert!(
                    !required(),
                    "REQUIRE_RABBIT=1 but no private RabbitMQ node starts: {reason}"
                );
                eprintln!("SKIPPED: no private RabbitMQ node starts: {reason}");
                None
            }
        }
    }

    /// Starts a node and waits until it has booted, or says why it cannot (for callers that
    /// must fail rather than skip).
    pub fn try_start(tag: &str) -> Result<Self, String> {
        Self::try_start_with(tag, None, false)
    }

    /// Starts a node that also listens for TLS: `prepare` writes what the listener needs
    /// (certificates, keys) into the node's directory and returns the `ssl_options.*` lines
    /// of its `rabbitmq.conf`. `None` (said loudly) when no node starts, as [`Self::start`].
    pub fn start_tls(tag: &str, prepare: impl FnOnce(&std::path::Path) -> String) -> Option<Self> {
        Self::or_skip(Self::try_start_with(tag, Some(Box::new(prepare)), false))
    }

    /// Starts a node with the management plugin on a loopback port of its own
    /// ([`PrivateNode::management_url`]). `None` (said loudly) when no node starts, as
    /// [`Self::start`].
    pub fn start_management(tag: &str) -> Option<Self> {
        Self::or_skip(Self::try_start_with(tag, None, true))
    }

    #[allow(clippy::type_complexity)]
    fn try_start_with(
        tag: &str,
        tls: Option<Box<dyn FnOnce(&std::path::Path) -> String + '_>>,
        management: bool,
    ) -> Result<Self, String> {
        use std::os::unix::fs::PermissionsExt;
        let (port, dist_port) = (free_port(), free_port());
        let tls_port = tls.as_ref().map(|_| free_port());
        let management_port = management.then(free_port);
        let name = format!("{}@localhost", unique(tag));
        let dir = std::env::temp_dir().join(name.replace('@', "-"));
        let write = |file: &str, text: &str| {
            std::fs::write(dir.join(file), text).map_err(|e| format!("{file}: {e}"))
        };
        let prepared = std::fs::create_dir_all(&dir)
            // The server runs as the `rabbitmq` user, which writes its data and logs here.
            .and_then(|()| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)))
            .map_err(|e| format!("{}: {e}", dir.display()))
            .and_then(|()| {
                let mut conf = format!("listeners.tcp.1 = 127.0.0.1:{port}\n");
                if let (Some(prepare), Some(tls_port)) = (tls, tls_port) {
                    conf.push_str(&format!("listeners.ssl.1 = 127.0.0.1:{tls_port}\n"));
                    conf.push_str(&prepare(&dir));
                    conf.push('\n');
                    // The server's user reads what `prepare` wrote.
                    for entry in std::fs::read_dir(&dir).map_err(|e| e.to_string())? {
                        let path = entry.map_err(|e| e.to_string())?.path();
                        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                    }
                }
                let plugins = match management_port {
                    Some(m) => {
                        conf.push_str(&format!(
                            "management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {m}\n"
                        ));
                        "[rabbitmq_management].\n"
                    }
                    None => "[].\n",
                };
                write("rabbitmq.conf", &conf)?;
                write("enabled_plugins", plugins)?;
                // Read instead of /etc/rabbitmq/rabbitmq-env.conf, which names the shared node.
                write("rabbitmq-env.conf", "ERL_EPMD_ADDRESS=127.0.0.1\n")
            })
            .and_then(|()| spawn_server(&name, port, dist_port, &dir));
        // A node that never started leaves no directory behind.
        let server = prepared.inspect_err(|_| {
            let _ = std::fs::remove_dir_all(&dir);
        })?;
        let node = PrivateNode {
            name,
            port,
            tls_port,
            management_port,
            dist_port,
            dir,
            server,
        };
        node.wait_booted()?;
        Ok(node)
    }

    /// Waits (rabbitmqctl's own wait: for the pid file, then for the boot to finish) until
    /// the node has booted, within 120 s.
    fn wait_booted(&self) -> Result<(), String> {
        let pid_file = self.dir.join("node.pid");
        let booted = self.ctl_output(&["wait", &pid_file.to_string_lossy(), "--timeout", "120"]);
        if !booted.status.success() {
            return Err(format!(
                "{} did not boot: {}{}",
                self.name,
                String::from_utf8_lossy(&booted.stderr),
                std::fs::read_to_string(self.dir.join("server.out")).unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// `amqp://` URI of the node.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// A binder on the node.
    pub fn binder(&self) -> RabbitBinder {
        RabbitBinder::new(RabbitSettings::from_uri(&self.url()))
    }

    /// `rabbitmqctl -q -n <node> <args>` started, not waited for (to watch the node while
    /// a command runs).
    pub fn ctl_command(&self, args: &[&str]) -> std::process::Child {
        std::process::Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name])
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("rabbitmqctl is installed with RabbitMQ")
    }

    /// The node's AMQP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The node's TLS port (a node started with [`PrivateNode::start_tls`]).
    pub fn tls_port(&self) -> u16 {
        self.tls_port.expect("a node started with start_tls")
    }

    /// `http://` base URL of the node's management API (a node started with
    /// [`PrivateNode::start_management`]).
    pub fn management_url(&self) -> String {
        let port = self
            .management_port
            .expect("a node started with start_management");
        format!("http://127.0.0.1:{port}")
    }

    /// The node's directory: its configuration, data and logs, and what `prepare` wrote.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    fn ctl_output(&self, args: &[&str]) -> std::process::Output {
        std::process::Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name])
            .args(args)
            .output()
            .expect("rabbitmqctl is installed with RabbitMQ")
    }

    /// Runs `rabbitmqctl -q -n <node> <args>` and returns what it printed; a failure fails
    /// the test with rabbitmqctl's own message.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.ctl_output(args);
        assert!(
            out.status.success(),
            "rabbitmqctl -n {} {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Polls `rabbitmqctl` until `done` holds for what it prints, within 30 s: for broker
    /// states that have no event to wait on from a client. Returns the last output.
    pub async fn ctl_until(&self, args: &[&str], done: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let out = self.ctl(args);
            if done(&out) {
                return out;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "rabbitmqctl {args:?} never showed the expected state; last:\n{out}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for PrivateNode {
    fn drop(&mut self) {
        let _ = self.ctl_output(&["stop"]);
        let _ = self.server.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl PrivateNode {
    /// The node's Erlang name (`<unique>@localhost`), as `join_cluster` and `-n` take it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Kills the node's Erlang VM with SIGKILL, as a crash or a lost machine would end it
    /// (no shutdown: its connections are reset, its peers see it vanish), and waits until
    /// the server process has exited.
    pub fn kill(&mut self) -> Result<(), String> {
        let pid_file = self.dir.join("node.pid");
        let pid = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("{}: {e}", pid_file.display()))?;
        let pid = pid.trim();
        let killed = std::process::Command::new("kill")
            .args(["-9", pid])
            .output()
            .map_err(|e| format!("kill: {e}"))?;
        if !killed.status.success() {
            return Err(format!(
                "kill -9 {pid}: {}",
                String::from_utf8_lossy(&killed.stderr)
            ));
        }
        self.server
            .wait()
            .map_err(|e| format!("rabbitmq-server: {e}"))?;
        Ok(())
    }

    /// Starts the node again, with the same name, ports and data directory (after
    /// [`kill`](Self::kill) or `rabbitmqctl stop`), and waits until it has booted: a
    /// cluster member rejoins its cluster.
    pub fn restart(&mut self) -> Result<(), String> {
        // A killed node leaves its pid file, which `rabbitmqctl wait` would read.
        let _ = std::fs::remove_file(self.dir.join("node.pid"));
        self.server = spawn_server(&self.name, self.port, self.dist_port, &self.dir)?;
        self.wait_booted()
    }

    /// Runs `rabbitmqctl -q -n <node> <args>`, or says why it failed.
    fn try_ctl(&self, args: &[&str]) -> Result<String, String> {
        let out = self.ctl_output(args);
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "rabbitmqctl -n {} {args:?}: {}{}",
                self.name,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            ))
        }
    }
}

/// A RabbitMQ cluster of the test's own: private nodes (each with its own name, ports and
/// data directory) joined with `join_cluster` to the first. The shared broker is never part
/// of it. Every node is stopped, and its directory removed, when the cluster is dropped.
pub struct Cluster {
    /// The members, the first being the one the others joined.
    pub nodes: Vec<PrivateNode>,
}

impl Cluster {
    /// Starts `size` nodes (at the same time), joins them into one cluster and waits until
    /// every member runs, or says why it cannot; nodes already started are stopped then.
    pub fn start(tag: &str, size: usize) -> Result<Self, String> {
        let started: Vec<Result<PrivateNode, String>> = std::thread::scope(|s| {
            let starting: Vec<_> = (0..size)
                .map(|i| s.spawn(move || PrivateNode::try_start(&format!("{tag}{i}"))))
                .collect();
            starting
                .into_iter()
                .map(|t| t.join().unwrap_or_else(|_| Err("start panicked".into())))
                .collect()
        });
        let mut nodes = Vec::new();
        let mut failures = Vec::new();
        for node in started {
            match node {
                Ok(node) => nodes.push(node),
                Err(e) => failures.push(e),
            }
        }
        let cluster = Cluster { nodes };
        if !failures.is_empty() {
            return Err(failures.join("; "));
        }
        // All nodes run as the `rabbitmq` user and so share its Erlang cookie.
        let first = cluster.nodes[0].name.clone();
        for node in &cluster.nodes[1..] {
            node.try_ctl(&["stop_app"])?;
            node.try_ctl(&["join_cluster", &first])?;
            node.try_ctl(&["start_app"])?;
            node.try_ctl(&["await_startup", "--timeout", "60"])?;
        }
        let running = cluster.nodes[0].try_ctl(&["eval", "length(rabbit_nodes:all_running())."])?;
        if running.trim() != size.to_string() {
            return Err(format!("{size} nodes joined, but {running} run"));
        }
        Ok(cluster)
    }

    /// `spring.rabbitmq.addresses` for the cluster: `127.0.0.1:<port>` of every node.
    pub fn addresses(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The name of the node leading quorum queue `queue`, asked of node `via`.
    pub fn leader_of(&self, queue: &str, via: usize) -> Result<String, String> {
        let listed = self.nodes[via].try_ctl(&["list_queues", "name", "leader"])?;
        listed
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .find(|(name, _)| *name == queue)
            .map(|(_, leader)| leader.trim().to_owned())
            .ok_or_else(|| format!("queue `{queue}` is not listed by node {via}:\n{listed}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Stopped at the same time: a member stopping waits on its peers, and one at a time
        // the last ones wait longest.
        std::thread::scope(|s| {
            for node in self.nodes.drain(..) {
                s.spawn(move || drop(node));
            }
        });
    }
}

/// Waits (60 s at most) until the application's health satisfies `f`, and returns it; fails
/// the test naming `what` and the last status otherwise.
pub async fn health_until(
    health: &binder_core::runtime::Health,
    what: &str,
    f: impl Fn(&binder_core::runtime::HealthStatus) -> bool,
) -> binder_core::runtime::HealthStatus {
    tokio::time::timeout(std::time::Duration::from_secs(60), health.wait_for(f))
        .await
        .unwrap_or_else(|_| panic!("health never became {what}: {}", health.status()))
}
