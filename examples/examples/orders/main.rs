//! The order-processing demo: an order is placed, stock is reserved, an invoice is created,
//! then a coupon is granted and an SMS sent, off the main path. Five services run in one
//! process on the embedded broker; one of them fails on suspicious orders, retries, and
//! dead-letters them.
//!
//! ```text
//! cargo run --example orders
//! ```
//!
//! `cargo run --example orders -- <service>` runs one of them alone (`order`, `stock`,
//! `invoice`, `coupon`, `sms`), for the demo as separate processes on a broker they share:
//! `multi-process.sh` beside this file starts `stream-broker` and each service on its own.
//!
//! The wiring is in `application.yaml` beside this file (or the file `STREAM_CONFIG` names).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use binder_core::config::{ConfigLoader, StreamConfig};
use binder_core::runtime::{App, FailureAction, HandlerError, RunningApp, State};
use serde::{Deserialize, Serialize};
use stream_macros::{input, output, stream_listener};

const ORDERS: u32 = 20;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Order {
    id: u32,
    region: String,
    sku: String,
    quantity: u32,
    total: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Reservation {
    order: Order,
    warehouse: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Invoice {
    order_id: u32,
    number: String,
    amount: f64,
}

/// What the services did, for the summary line.
#[derive(Debug, Default)]
struct Counts {
    placed: AtomicU32,
    reserved: AtomicU32,
    invoiced: AtomicU32,
    couponed: AtomicU32,
    notified: AtomicU32,
    dead_lettered: AtomicU32,
    changed: tokio::sync::Notify,
}

impl Counts {
    fn bump(&self, counter: &AtomicU32) {
        counter.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_waiters();
    }

    fn get(&self) -> [u32; 6] {
        [
            &self.placed,
            &self.reserved,
            &self.invoiced,
            &self.couponed,
            &self.notified,
            &self.dead_lettered,
        ]
        .map(|c| c.load(Ordering::SeqCst))
    }
}

// ---- bindings -----------------------------------------------------------------------------

#[output("placed-out")]
#[derive(Debug)]
struct PlacedOut;

#[input("placed-in")]
#[derive(Debug)]
struct PlacedIn;

#[output("reserved-out")]
#[derive(Debug)]
struct ReservedOut;

#[input("reserved-in")]
#[derive(Debug)]
struct ReservedIn;

#[output("invoices-out")]
#[derive(Debug)]
struct InvoicesOut;

#[input("coupons-in")]
#[derive(Debug)]
struct CouponsIn;

#[input("sms-in")]
#[derive(Debug)]
struct SmsIn;

// ---- services -----------------------------------------------------------------------------

/// stock-service: reserves stock for each placed order.
#[stream_listener(input = PlacedIn, output = ReservedOut)]
async fn reserve_stock(order: Order, counts: State<Counts>) -> Reservation {
    let warehouse = if order.region == "eu" {
        "Rotterdam"
    } else {
        "Memphis"
    };
    println!(
        "[stock]   reserved {} x {} for order {} in {warehouse}",
        order.quantity, order.sku, order.id
    );
    counts.bump(&counts.reserved);
    Reservation {
        order,
        warehouse: warehouse.to_owned(),
    }
}

/// invoice-service: invoices reserved orders; refuses suspicious totals (retried, then
/// dead-lettered to `stock-reserved.invoicing.dlq`).
#[stream_listener(input = ReservedIn, output = InvoicesOut)]
async fn create_invoice(
    reservation: Reservation,
    counts: State<Counts>,
) -> Result<Invoice, HandlerError> {
    let order = reservation.order;
    if order.total > 1_000.0 {
        println!(
            "[invoice] order {} looks suspicious ({:.2}): refusing",
            order.id, order.total
        );
        return Err(HandlerError::retryable(format!(
            "order {} total {:.2} exceeds the fraud limit",
            order.id, order.total
        )));
    }
    counts.bump(&counts.invoiced);
    let number = format!("INV-{:05}", order.id);
    println!(
        "[invoice] {number} for order {}: {:.2}",
        order.id, order.total
    );
    Ok(Invoice {
        order_id: order.id,
        number,
        amount: order.total,
    })
}

/// coupon-service: grants a coupon for each invoice.
#[stream_listener(input = CouponsIn)]
async fn grant_coupon(invoice: Invoice, counts: State<Counts>) {
    let percent = if invoice.amount > 100.0 { 10 } else { 5 };
    println!("[coupon]  {percent}% coupon for order {}", invoice.order_id);
    counts.bump(&counts.couponed);
}

/// sms-service: texts the customer.
#[stream_listener(input = SmsIn)]
async fn send_sms(invoice: Invoice, counts: State<Counts>) {
    println!(
        "[sms]     \"Your order {} is confirmed, invoice {}\"",
        invoice.order_id, invoice.number
    );
    counts.bump(&counts.notified);
}

// ---- the process --------------------------------------------------------------------------

fn config() -> Result<StreamConfig, binder_core::config::ConfigError> {
    let loader = ConfigLoader::new();
    if std::env::var_os("STREAM_CONFIG").is_some() {
        return loader.load();
    }
    loader
        .file(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/orders/application.yaml"
        ))
        .load()
}

async fn start(
    config: &StreamConfig,
    bindings: &[&str],
    counts: &Arc<Counts>,
    build: impl FnOnce(binder_core::runtime::AppBuilder) -> binder_core::runtime::AppBuilder,
) -> Result<RunningApp, Error> {
    // Every service counts into the same totals.
    let builder = App::builder(config.select(bindings)).shared_state(counts.clone());
    Ok(build(builder).start().await?)
}

#[tokio::main]
async fn main() -> binder_core::runtime::ServiceExit {
    // Errors print as a person reads them; a configuration problem exits with status 2.
    run().await.into()
}

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The services of the demo, each its own application.
const SERVICES: &[&str] = &["order", "stock", "invoice", "coupon", "sms"];

async fn run() -> Result<(), Error> {
    // Both binders are available; the configuration picks one
    // (SPRING_CLOUD_STREAM_DEFAULTBINDER=rabbit runs the same services on RabbitMQ).
    binder_embedded::link();
    binder_rabbit::link();
    let config = config()?;
    // Logs to stderr (RUST_LOG or logging.level.* choose what), as run_service does.
    binder_core::runtime::init_logging(&config)?;
    let counts = Arc::new(Counts::default());
    match std::env::args().nth(1).as_deref() {
        None | Some("all") => all_in_one(&config, &counts).await,
        Some(service) if SERVICES.contains(&service) => one(service, &config, &counts).await,
        Some(other) => Err(format!(
            "no service `{other}`: give one of {} (or `all`, the default)",
            SERVICES.join(", ")
        )
        .into()),
    }
}

/// The orders that fail the fraud check: every sixth.
fn suspicious() -> u32 {
    ORDERS / 6
}

/// Every service in this process, then the summary line.
async fn all_in_one(config: &StreamConfig, counts: &Arc<Counts>) -> Result<(), Error> {
    let stock = stock_service(config, counts).await?;
    let invoicing = invoice_service(config, counts).await?;
    let coupons = coupon_service(config, counts).await?;
    let sms = sms_service(config, counts).await?;
    let orders = order_service(config, counts).await?;
    place_orders(&orders, counts).await?;

    // Wait until every order went all the way, or was dead-lettered.
    let finished = wait_for(counts, |c| {
        let [placed, reserved, invoiced, couponed, notified, dead] = c;
        reserved == placed
            && invoiced + dead == placed
            && couponed == invoiced
            && notified == invoiced
    })
    .await;

    for app in [orders, stock, coupons, sms].into_iter().chain(invoicing) {
        app.shutdown().await;
    }
    let [placed, reserved, invoiced, couponed, notified, dead] = counts.get();
    println!(
        "summary: placed={placed} reserved={reserved} invoiced={invoiced} couponed={couponed} notified={notified} dead-lettered={dead}"
    );
    if !finished {
        return Err("the demo did not complete within 30 s".into());
    }
    Ok(())
}

/// One service in this process (the others run in their own, on a broker they share, e.g.
/// `stream-broker`): it says `ready` once its bindings are up, does its share of the fixed
/// workload, and ends with a `done:` line of its counts (`multi-process.sh` sums them into
/// the summary line).
async fn one(service: &str, config: &StreamConfig, counts: &Arc<Counts>) -> Result<(), Error> {
    let expected_invoices = ORDERS - suspicious();
    /// Whether a service's counts show its share done, given the invoices expected.
    type Done = fn([u32; 6], u32) -> bool;
    let (apps, done): (Vec<RunningApp>, Done) = match service {
        "stock" => (vec![stock_service(config, counts).await?], |c, _| {
            c[1] == ORDERS
        }),
        "invoice" => (invoice_service(config, counts).await?, |c, _| {
            c[2] + c[5] == ORDERS
        }),
        "coupon" => (vec![coupon_service(config, counts).await?], |c, n| {
            c[3] == n
        }),
        "sms" => (vec![sms_service(config, counts).await?], |c, n| c[4] == n),
        _ => {
            let orders = order_service(config, counts).await?;
            println!("[{service}] ready");
            place_orders(&orders, counts).await?;
            orders.shutdown().await;
            println!("done: placed={}", counts.get()[0]);
            return Ok(());
        }
    };
    println!("[{service}] ready");
    let finished = wait_for(counts, |c| done(c, expected_invoices)).await;
    for app in apps {
        app.shutdown().await;
    }
    let [_, reserved, invoiced, couponed, notified, dead] = counts.get();
    match service {
        "stock" => println!("done: reserved={reserved}"),
        "invoice" => println!("done: invoiced={invoiced} dead-lettered={dead}"),
        "coupon" => println!("done: couponed={couponed}"),
        _ => println!("done: notified={notified}"),
    }
    if !finished {
        return Err(format!("the {service} service did not finish its share within 30 s").into());
    }
    Ok(())
}

/// Waits (30 s at most) until the counts satisfy `done`; whether they did.
async fn wait_for(counts: &Counts, done: impl Fn([u32; 6]) -> bool) -> bool {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let changed = counts.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(counts.get()) {
                break;
            }
            changed.await;
        }
    })
    .await
    .is_ok()
}

/// stock-service.
async fn stock_service(config: &StreamConfig, counts: &Arc<Counts>) -> Result<RunningApp, Error> {
    start(config, &["placed-in", "reserved-out"], counts, |b| {
        b.register(&reserve_stock_listener)
    })
    .await
}

/// invoice-service: two instances in one group compete for reservations.
async fn invoice_service(
    config: &StreamConfig,
    counts: &Arc<Counts>,
) -> Result<Vec<RunningApp>, Error> {
    let mut invoicing = Vec::new();
    for _ in 0..2 {
        let c = counts.clone();
        invoicing.push(
            start(config, &["reserved-in", "invoices-out"], counts, |b| {
                b.register(&create_invoice_listener).on_error(move |f| {
                    if f.action == FailureAction::Republished {
                        println!(
                            "[invoice] gave up after {} attempts, dead-lettered: {}",
                            f.attempts, f.error
                        );
                        c.bump(&c.dead_lettered);
                    }
                })
            })
            .await?,
        );
    }
    Ok(invoicing)
}

/// coupon-service.
async fn coupon_service(config: &StreamConfig, counts: &Arc<Counts>) -> Result<RunningApp, Error> {
    start(config, &["coupons-in"], counts, |b| {
        b.register(&grant_coupon_listener)
    })
    .await
}

/// sms-service.
async fn sms_service(config: &StreamConfig, counts: &Arc<Counts>) -> Result<RunningApp, Error> {
    start(config, &["sms-in"], counts, |b| {
        b.register(&send_sms_listener)
    })
    .await
}

/// order-service's output.
async fn order_service(config: &StreamConfig, counts: &Arc<Counts>) -> Result<RunningApp, Error> {
    start(config, &["placed-out"], counts, |b| {
        b.output(PlacedOut::NAME)
    })
    .await
}

/// order-service: places a bounded workload; every sixth order is suspicious.
async fn place_orders(orders: &RunningApp, counts: &Counts) -> Result<(), Error> {
    let out = orders
        .output(PlacedOut::NAME)
        .expect("declared by order_service");
    for id in 1..=ORDERS {
        let order = Order {
            id,
            region: if id % 2 == 0 { "eu" } else { "us" }.to_owned(),
            sku: format!("SKU-{}", 100 + id % 4),
            quantity: 1 + id % 3,
            total: if id % 6 == 0 {
                5_000.0
            } else {
                20.0 * f64::from(id)
            },
        };
        println!(
            "[orders]  placed order {id} ({}, {:.2})",
            order.region, order.total
        );
        out.send(&order).await?;
        counts.bump(&counts.placed);
    }
    Ok(())
}
