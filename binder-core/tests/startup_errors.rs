//! Startup problems keep their typed causes beside the text a person reads.

use std::sync::Arc;

use binder_core::config::ConfigLoader;
use binder_core::runtime::{
    App, BinderLookupError, ExpressionError, HandlerError, OutputError, StartupProblem, handler,
};
use binder_embedded::EmbeddedBinder;
use binder_embedded::engine::Broker;

fn config(yaml: &str) -> binder_core::config::StreamConfig {
    ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(yaml)
        .load()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test]
async fn each_problem_has_its_text_and_its_cause() {
    let err = App::builder(config(
        "spring.cloud.stream:\n  bindings:\n    out: {destination: se-out, producer: {partitionKeyExpression: \"headers[\", partitionCount: 2}}\n    in: {destination: se-in, binder: rabbit}\n",
    ))
    .binder("embedded", Arc::new(EmbeddedBinder::new(Broker::new())))
    .listener("in", handler::incoming(|_m| async { Ok::<(), HandlerError>(()) }))
    .output("out")
    .start()
    .await
    .unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
    assert_eq!(err.causes().len(), 2);
    for (text, cause) in err.problems.iter().zip(err.causes()) {
        assert_eq!(*text, cause.to_string());
    }
    let output = err
        .causes()
        .iter()
        .find_map(|c| match c {
            StartupProblem::Output(OutputError::Expression {
                binding,
                property,
                source,
                ..
            }) => Some((binding, *property, source)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no output expression problem: {err}"));
    assert_eq!(output.0, "out");
    assert_eq!(output.1, "partitionKeyExpression");
    let ExpressionError::Syntax(syntax) = output.2 else {
        panic!("{:?}", output.2)
    };
    assert_eq!(syntax.position, 8);
    let lookup = err
        .causes()
        .iter()
        .find_map(|c| match c {
            StartupProblem::Binder(BinderLookupError::Unavailable {
                binding, binder, ..
            }) => Some((binding, binder)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no binder problem: {err}"));
    assert_eq!(lookup, (&"in".to_owned(), &"rabbit".to_owned()));
}

#[test]
fn a_routing_key_expression_that_does_not_parse_is_refused_with_the_configuration() {
    // The AMQP binders' `routingKeyExpression` is checked by the `rabbit` extension when the
    // configuration loads, before anything starts.
    let _linked = binder_amqp::RABBIT_NAMESPACE;
    let err = ConfigLoader::new()
        .env(Vec::<(String, String)>::new())
        .yaml_str(
            "spring.cloud.stream.rabbit.bindings.out.producer.routingKeyExpression: \"headers[\"\n",
        )
        .load()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("spring.cloud.stream.rabbit.bindings.out.producer.routingKeyExpression: invalid expression `headers[`: expected a quoted name at position 8"),
        "{err}"
    );
}
