use stream_macros::{input, stream_listener};

#[input("orders-in")]
pub struct OrdersIn;

#[stream_listener(input = OrdrsIn)]
async fn handle(_order: String) {}

fn main() {}
