use stream_macros::stream_listener;

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[stream_listener(input = binder_core::runtime::Sink, schema)]
async fn handle(order: Order) {
    let _ = order.id;
}

fn main() {}
