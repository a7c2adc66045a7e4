use stream_macros::input;

#[input]
pub struct OrdersIn;

fn main() {}
