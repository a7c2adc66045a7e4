use stream_macros::{output, stream_listener};

#[output("invoices-out")]
pub struct InvoicesOut;

#[stream_listener(input = InvoicesOut)]
async fn handle(_order: String) {}

fn main() {}
