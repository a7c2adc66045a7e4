use stream_macros::stream_listener;

#[stream_listener(input = binder_core::runtime::Sink, schema)]
async fn handle() {}

fn main() {}
