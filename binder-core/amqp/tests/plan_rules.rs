//! Plan rules that golden files do not show: roles, conflicts, anonymous names.

use binder_amqp::topology::{self, BindingRole, infer_role, plan_consumer, plan_producer};
use binder_core::config::ConfigLoader;

fn cfg(text: &str) -> binder_core::config::StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(text)
        .load()
        .unwrap()
}

#[test]
fn roles_are_inferred_from_sections_groups_and_names() {
    let c = cfg(r#"
spring.cloud.stream.bindings:
  input: {destination: a}
  output: {destination: a}
  orders-in-0: {destination: a}
  orders-out-0: {destination: a}
  grouped: {group: g}
  tuned: {consumer: {maxAttempts: 1}}
  sender: {producer: {partitionCount: 1}}
  plain: {destination: a}
"#);
    let role = |n: &str| infer_role(&c.binding(n));
    assert_eq!(role("input"), BindingRole::Consumer);
    assert_eq!(role("orders-in-0"), BindingRole::Consumer);
    assert_eq!(role("grouped"), BindingRole::Consumer);
    assert_eq!(role("tuned"), BindingRole::Consumer);
    assert_eq!(role("output"), BindingRole::Producer);
    assert_eq!(role("orders-out-0"), BindingRole::Producer);
    assert_eq!(role("sender"), BindingRole::Producer);
    assert_eq!(role("plain"), BindingRole::Producer);
}

#[test]
fn a_conflicting_redeclaration_names_the_binding_and_the_difference() {
    let c = cfg(r#"
spring.cloud.stream:
  bindings:
    input: {destination: shared, group: g}
    output: {destination: shared}
  rabbit.bindings.output.producer.exchangeType: fanout
"#);
    let err = topology::plan(&c).unwrap_err().to_string();
    assert_eq!(
        err,
        "binding `output`: exchange `shared` is declared twice with different type (topic vs fanout)"
    );
}

#[test]
fn planning_twice_declares_nothing_new() {
    let c = cfg(
        "spring.cloud.stream.bindings.input: {destination: d, group: g}\nspring.cloud.stream.rabbit.bindings.input.consumer.autoBindDlq: true",
    );
    let mut plan = topology::plan(&c).unwrap();
    let before = plan.clone();
    plan.merge(topology::plan(&c).unwrap()).unwrap();
    assert_eq!(plan, before);
}

#[test]
fn consumer_topology_names_queues_and_dead_letter_target() {
    let c = cfg(r#"
spring.cloud.stream:
  bindings:
    input: {destination: orders, group: billing, consumer: {partitioned: true, instanceCount: 4, instanceIndexList: [1, 3]}}
  rabbit.bindings.input.consumer: {autoBindDlq: true}
"#);
    let t = plan_consumer(&c.binding("input"), "unused");
    assert_eq!(t.exchange, "orders");
    assert_eq!(t.queues, ["orders.billing-1", "orders.billing-3"]);
    assert_eq!(
        t.dead_letter,
        Some(("DLX".to_owned(), "orders.billing".to_owned()))
    );

    let anon = cfg("spring.cloud.stream.bindings.input.destination: ticks");
    let suffix = topology::anonymous_suffix();
    let t = plan_consumer(&anon.binding("input"), &suffix);
    assert_eq!(t.queues, [format!("ticks.anonymous.{suffix}")]);
    assert_eq!(t.dead_letter, None);
    let q = &t.plan.queues[0];
    assert!(q.exclusive && q.auto_delete && !q.durable);
}

#[test]
fn producer_topology_publishes_to_the_prefixed_exchange() {
    let c = cfg("spring.cloud.stream.rabbit.bindings.output.producer.prefix: 'svc.'");
    let t = plan_producer(&c.binding("output"));
    assert_eq!(t.exchange, "svc.output");
    assert_eq!(t.plan.exchanges.len(), 1);
    assert!(t.plan.queues.is_empty());
}
