use stream_macros::stream_listener;

#[stream_listener(condition = "headers['a'] == 'b'")]
async fn handle(_order: String) {}

fn main() {}
