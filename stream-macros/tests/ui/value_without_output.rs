use stream_macros::stream_listener;

#[stream_listener(input = binder_core::runtime::Sink)]
async fn handle(order: String) -> String {
    order
}

fn main() {}
