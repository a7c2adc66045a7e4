use stream_macros::stream_listener;

pub struct NotSerde;

#[stream_listener(input = binder_core::runtime::Sink)]
async fn handle(_order: NotSerde) {}

fn main() {}
