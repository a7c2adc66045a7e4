use stream_macros::stream_listener;

#[stream_listener(input = binder_core::runtime::Sink, group = "billing")]
async fn handle(_order: String) {}

fn main() {}
