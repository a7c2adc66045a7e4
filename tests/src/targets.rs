//! The binders the kit runs against.

use async_trait::async_trait;
use binder_amqp::AmqpBroker;
use binder_core::binder::BinderErrorKind;
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;
use binder_rabbit::{RabbitBinder, RabbitSettings};

use crate::kit::{Capabilities, KitBinder, Target};

/// The `embedded` binder, a fresh broker per case.
#[derive(Debug, Clone, Copy)]
pub struct Embedded;

#[async_trait]
impl Target for Embedded {
    fn binder_type(&self) -> &'static str {
        "embedded"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn binder(&self) -> Result<KitBinder, String> {
        Ok(KitBinder::amqp(EmbeddedBinder::new(Broker::new())))
    }
}

/// The `rabbit` binder against the RabbitMQ at `AMQP_URL`.
#[derive(Debug, Clone, Copy)]
pub struct Rabbit;

#[async_trait]
impl Target for Rabbit {
    fn binder_type(&self) -> &'static str {
        "rabbit"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn binder(&self) -> Result<KitBinder, String> {
        let url = amqp_url();
        let binder = RabbitBinder::new(RabbitSettings::from_uri(&url));
        // A cheap round trip tells whether a broker answers.
        match tokio::time::timeout(
            std::time::Duration::from_secs(5),
            binder.inspect("amq.rabbitmq.trace-probe-nonexistent"),
        )
        .await
        {
            Ok(Err(e)) if e.kind() == BinderErrorKind::Unreachable => {
                Err(format!("no RabbitMQ answers at {url}: {e}"))
            }
            Err(_) => Err(format!("no RabbitMQ answers at {url} within 5 s")),
            Ok(_) => Ok(KitBinder::amqp(binder)),
        }
    }

    fn required(&self) -> bool {
        std::env::var("REQUIRE_RABBIT").is_ok_and(|v| v == "1")
    }
}

/// The `rabbit` binder against our own broker on the network: a `stream-broker` server on a
/// free loopback port, started for each case (the third target beside `embedded` and
/// RabbitMQ).
#[derive(Debug, Clone, Copy)]
pub struct StreamBroker;

#[async_trait]
impl Target for StreamBroker {
    fn binder_type(&self) -> &'static str {
        "rabbit"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }
    async fn binder(&self) -> Result<KitBinder, String> {
        let config = stream_broker::ServerConfig {
            listen: "127.0.0.1:0".parse().expect("an address"),
            ..Default::default()
        };
        let server = stream_broker::Server::standalone(config)
            .await
            .map_err(|e| format!("stream-broker does not start: {e}"))?;
        let url = format!("amqp://guest:guest@{}/%2f", server.local_addr());
        let mut kit = KitBinder::amqp(RabbitBinder::new(RabbitSettings::from_uri(&url)));
        kit.server = Some(server);
        Ok(kit)
    }
    fn required(&self) -> bool {
        true
    }
}

/// The broker the rabbit tests use: `AMQP_URL`, by default the local RabbitMQ.
pub fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// The channel binder (no exchanges, no queues): every case that needs no AMQP broker.
#[derive(Debug, Clone, Copy)]
pub struct Channels;

#[async_trait]
impl Target for Channels {
    fn binder_type(&self) -> &'static str {
        "channels"
    }
    fn capabilities(&self) -> Capabilities {
        /// The case declares, consumes or counts a queue through the AMQP broker level.
        const QUEUES: &str = "it declares a queue, consumes one directly (a DLQ, a seeded queue) or declares topology through the AMQP broker level, which a binder without queues does not have";
        /// The case is about `acknowledgeMode: NONE`, a Rabbit extension property.
        const NO_ACK: &str = "it is about acknowledgeMode NONE (the broker forgets a delivery as it sends it), and this binder acknowledges AUTO only";
        let mut skips: Vec<(&'static str, &'static str)> = Vec::new();
        skips.extend(
            [
                "ack_requeue_reject",
                "batches_are_assembled_in_order_and_dead_lettered_whole",
                "a_batch_binding_whose_queue_goes_while_a_batch_fills_recovers",
                "cancelled_auto_ack_subscriptions_hand_out_what_they_received",
                "dead_letters_fit_beside_large_foreign_headers",
                "poison_messages_go_to_the_dlq",
                "prefetch_bounds_unsettled_deliveries",
                "republish_adds_diagnostic_headers",
                "retries_are_counted_and_do_not_block",
                "round_trip_durable_group",
                "settling_the_oldest_last_loses_nothing",
                "topology_is_idempotent_and_conflicts_are_clear",
            ]
            .map(|case| (case, QUEUES)),
        );
        skips.extend(
            [
                "auto_ack_deliveries_received_are_handled_at_shutdown",
                "auto_ack_deliveries_survive_a_pause_with_busy_handlers",
                "paused_auto_ack_bindings_leave_messages_queued",
            ]
            .map(|case| (case, NO_ACK)),
        );
        skips.extend([
            (
                "binding_routing_keys_select",
                "AMQP routing: bindingRoutingKey patterns select messages, and this binder has no routing keys",
            ),
            (
                "routing_key_expressions_route",
                "AMQP routing: routing-key expressions select queues, and this binder has no routing keys",
            ),
            (
                "dead_letters_of_large_payloads_keep_the_whole_trace",
                "AMQP dead-lettering: the x-exception headers are sized to the connection's frame_max",
            ),
        ]);
        Capabilities { skips }
    }
    async fn binder(&self) -> Result<KitBinder, String> {
        Ok(KitBinder::plain(crate::channels::ChannelBinder::new()))
    }
}
