//! An order as a saga: charge the card, reserve the items, ship them, each a
//! step. When a step fails for good (a declined card, an empty shelf, a
//! carrier that keeps failing until its retries run out), the steps that
//! succeeded are undone in reverse order by compensation steps: the
//! reservation released, the charge refunded. Every step and compensation
//! is recorded, so after a crash the saga carries on where it was and never
//! charges or refunds twice.
//!
//! The outside services here are in memory ([`Shop`]); each applies an
//! effect once per idempotency key ([`StepContext::key`]), as a real
//! payment service would with the key as its idempotency key.
//!
//! Run it with `cargo run -p fusee --example order`; `cargo test -p fusee
//! --examples` runs it too (its `main`, from the test at the bottom).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fusee::{Config, Ctx, Engine, Failure, RetryPolicy, StepContext, StepError, Workflow};
use serde::{Deserialize, Serialize};

/// What a customer ordered.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    id: String,
    cents: u64,
    sku: String,
    qty: u32,
    address: String,
}

/// How an order ended: shipped, or undone after a step failed for good.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
enum Outcome {
    Shipped {
        tracking: String,
    },
    Compensated {
        failed_step: String,
        reason: String,
        undone: Vec<String>,
    },
}

/// Something done that a compensation step undoes.
enum Done {
    Charged(String),
    Reserved(String),
}

const ORDER: Workflow<Order, Outcome> = Workflow::new("order");

/// The largest charge the card issuer accepts.
const CARD_LIMIT: u64 = 100_000;

/// The outside world the steps call: payments, a warehouse, a carrier.
/// Each effect is applied once per idempotency key.
#[derive(Default)]
struct Shop {
    state: Mutex<ShopState>,
}

#[derive(Default)]
struct ShopState {
    /// Charges by idempotency key: (order, cents, refunded).
    charges: BTreeMap<String, (String, u64, bool)>,
    /// Units on the shelf, by SKU.
    stock: BTreeMap<String, u32>,
    /// Reservations by idempotency key: (sku, qty, released).
    reservations: BTreeMap<String, (String, u32, bool)>,
    /// Shipments by idempotency key: tracking number.
    shipments: BTreeMap<String, String>,
}

impl Shop {
    fn with_stock(stock: &[(&str, u32)]) -> Self {
        let shop = Shop::default();
        shop.state().stock = stock.iter().map(|(s, n)| (s.to_string(), *n)).collect();
        shop
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ShopState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn charge(&self, key: &str, order: &str, cents: u64) -> Result<String, StepError> {
        if cents > CARD_LIMIT {
            return Err(
                StepError::retryable(format!("{cents} cents is over the card's limit"))
                    .kind("declined"),
            );
        }
        let mut s = self.state();
        if !s.charges.contains_key(key) {
            println!("  payments: charged {cents} cents for {order}");
            s.charges.insert(key.into(), (order.into(), cents, false));
        }
        Ok(key.to_string())
    }

    fn refund(&self, charge: &str) {
        let mut s = self.state();
        if let Some((order, cents, refunded)) = s.charges.get_mut(charge)
            && !*refunded
        {
            println!("  payments: refunded {cents} cents for {order}");
            *refunded = true;
        }
    }

    fn reserve(&self, key: &str, sku: &str, qty: u32) -> Result<String, StepError> {
        let mut s = self.state();
        if s.reservations.contains_key(key) {
            return Ok(key.to_string());
        }
        let shelf = s.stock.get(sku).copied().unwrap_or(0);
        if shelf < qty {
            // Waiting will not fill the shelf: fail the step at once.
            return Err(
                StepError::fatal(format!("{qty} × {sku} wanted, {shelf} on the shelf"))
                    .kind("out-of-stock"),
            );
        }
        s.stock.insert(sku.into(), shelf - qty);
        s.reservations.insert(key.into(), (sku.into(), qty, false));
        println!("  warehouse: reserved {qty} × {sku}");
        Ok(key.to_string())
    }

    fn release(&self, reservation: &str) {
        let mut s = self.state();
        let Some((sku, qty, released)) = s.reservations.get_mut(reservation) else {
            return;
        };
        if *released {
            return;
        }
        *released = true;
        let (sku, qty) = (sku.clone(), *qty);
        *s.stock.entry(sku.clone()).or_default() += qty;
        println!("  warehouse: released {qty} × {sku}");
    }

    fn ship(&self, key: &str, order: &Order, attempt: u32) -> Result<String, StepError> {
        if order.address.contains("Atlantis") {
            println!(
                "  carrier: no route to {} (attempt {attempt})",
                order.address
            );
            return Err(StepError::retryable(format!(
                "no route to {}",
                order.address
            )));
        }
        let mut s = self.state();
        let next = s.shipments.len() + 1;
        let tracking = s
            .shipments
            .entry(key.into())
            .or_insert_with(|| format!("TRACK-{next:04}"))
            .clone();
        println!("  carrier: {} goes out as {tracking}", order.id);
        Ok(tracking)
    }
}

/// The saga: the steps forward, then, if one failed for good, the
/// compensations of those that succeeded, newest first. `done` needs no
/// storage of its own: after a restart, the replay of the recorded steps
/// builds it again.
async fn place(ctx: Ctx, order: Order, shop: Arc<Shop>) -> Result<Outcome, Failure> {
    let mut done = Vec::new();
    match forward(&ctx, &order, &shop, &mut done).await {
        Ok(tracking) => Ok(Outcome::Shipped { tracking }),
        Err((failed_step, error)) => {
            let mut undone = Vec::new();
            for d in done.into_iter().rev() {
                undone.push(compensate(&ctx, &shop, d).await?);
            }
            Ok(Outcome::Compensated {
                failed_step: failed_step.to_string(),
                reason: error.message,
                undone,
            })
        }
    }
}

/// Charge, reserve, ship; `done` collects what a compensation must undo.
/// Returns the tracking number, or the step that failed for good and why.
async fn forward(
    ctx: &Ctx,
    order: &Order,
    shop: &Arc<Shop>,
    done: &mut Vec<Done>,
) -> Result<String, (&'static str, StepError)> {
    let (id, cents) = (order.id.clone(), order.cents);
    let charge = ctx
        .step(
            "charge",
            service(shop, move |shop, step| shop.charge(step.key(), &id, cents)),
        )
        // A declined card stays declined: no retry for that kind.
        .retry(quick_retries().non_retryable("declined"))
        .await
        .map_err(|e| ("charge", e))?;
    done.push(Done::Charged(charge));

    let (sku, qty) = (order.sku.clone(), order.qty);
    let reservation = ctx
        .step(
            "reserve",
            service(shop, move |shop, step| shop.reserve(step.key(), &sku, qty)),
        )
        .retry(quick_retries())
        .await
        .map_err(|e| ("reserve", e))?;
    done.push(Done::Reserved(reservation));

    let order = order.clone();
    ctx.step(
        "ship",
        service(shop, move |shop, step| {
            shop.ship(step.key(), &order, step.attempt())
        }),
    )
    // Three attempts, then the order is undone.
    .retry(quick_retries().attempts(3))
    .await
    .map_err(|e| ("ship", e))
}

/// Undoes `done` in a step of its own, and says what it did. A
/// compensation must happen: its policy retries many times.
async fn compensate(ctx: &Ctx, shop: &Arc<Shop>, done: Done) -> Result<String, StepError> {
    let (name, said) = match &done {
        Done::Charged(_) => ("refund", "refunded the charge"),
        Done::Reserved(_) => ("release", "released the reservation"),
    };
    let undo = move |shop: &Shop, _: &StepContext| {
        match &done {
            Done::Charged(charge) => shop.refund(charge),
            Done::Reserved(reservation) => shop.release(reservation),
        }
        Ok(())
    };
    ctx.step(name, service(shop, undo))
        .retry(quick_retries().attempts(50))
        .await?;
    Ok(said.to_string())
}

/// Retries a few milliseconds apart, so the example runs in a moment.
fn quick_retries() -> RetryPolicy {
    RetryPolicy::default().backoff(Duration::from_millis(5), 2.0, Duration::from_millis(20))
}

/// A step function calling the shop: `call` with the shop and the step's
/// context, as the async function [`Ctx::step`] takes.
fn service<T, F>(
    shop: &Arc<Shop>,
    call: F,
) -> impl Fn(StepContext) -> std::future::Ready<Result<T, StepError>> + Send + Sync + 'static
where
    F: Fn(&Shop, &StepContext) -> Result<T, StepError> + Send + Sync + 'static,
{
    let shop = Arc::clone(shop);
    move |step| std::future::ready(call(&shop, &step))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let shop = Arc::new(Shop::with_stock(&[("lamp", 10), ("vase", 2)]));
    let engine = Engine::open(Config::memory()).await?;
    let workflow_shop = Arc::clone(&shop);
    engine.register(ORDER, move |ctx: Ctx, order: Order| {
        place(ctx, order, Arc::clone(&workflow_shop))
    });

    let order = |id: &str, cents, sku: &str, qty, address: &str| Order {
        id: id.into(),
        cents,
        sku: sku.into(),
        qty,
        address: address.into(),
    };
    let orders = [
        order("order-1", 4_999, "lamp", 2, "1 Main St"),
        order("order-2", 250_000, "lamp", 1, "2 Main St"),
        order("order-3", 12_000, "vase", 5, "3 Main St"),
        order("order-4", 7_500, "lamp", 3, "Atlantis"),
    ];
    for o in &orders {
        println!(
            "{}: {} × {} for {} cents to {}",
            o.id, o.qty, o.sku, o.cents, o.address
        );
        let outcome = engine.execute(ORDER, &o.id, o).await?;
        match &outcome {
            Outcome::Shipped { tracking } => println!("{}: shipped as {tracking}", o.id),
            Outcome::Compensated {
                failed_step,
                reason,
                undone,
            } => println!(
                "{}: {failed_step} failed for good ({reason}); undone: {}",
                o.id,
                if undone.is_empty() {
                    "nothing".to_string()
                } else {
                    undone.join(", then ")
                }
            ),
        }
    }
    engine.close().await?;

    // What the shop ends with: one order paid and shipped, everything
    // else refunded and back on the shelf.
    let s = shop.state();
    let kept: u64 = s.charges.values().filter(|c| !c.2).map(|c| c.1).sum();
    let stock: Vec<String> = s.stock.iter().map(|(k, v)| format!("{v} × {k}")).collect();
    println!("kept {kept} cents; on the shelf: {}", stock.join(", "));
    if kept != 4_999 || s.stock.get("lamp") != Some(&8) || s.stock.get("vase") != Some(&2) {
        return Err("the books do not balance".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The example's whole `main` runs to the end.
    #[test]
    fn main_runs_to_completion() {
        super::main().expect("the order example runs");
    }
}
