use stream_macros::stream_listener;

#[stream_listener(input = binder_core::runtime::Sink)]
async fn handle(_order: String, _other: u64) {}

fn main() {}
