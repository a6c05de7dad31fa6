//! The order saga with the console on: charge the card, reserve the items,
//! wait for a person's approval (a signal, sent from the console), ship;
//! when a step fails for good or the approval is refused, the charge is
//! refunded and the reservation released (compensation steps).
//!
//! ```text
//! FUSEE_ADMIN_TOKEN=admin FUSEE_READ_TOKEN=read cargo run -p fusee-server --example console
//! ```
//!
//! then open <http://127.0.0.1:7700/>, log in with a token, open a run
//! waiting for approval, and send it the signal `approved` with payload
//! `true` (or `false`). Without the two variables the server runs without
//! tokens (it listens on loopback only). `FUSEE_CONSOLE_ADDR` sets the
//! address; `FUSEE_CONSOLE_EXIT_AFTER_MS` stops it after that long (the
//! examples' smoke run).

use std::time::Duration;

use fusee::{Config, Ctx, Engine, Failure, Saga, Signal, StepError, Workflow};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Order {
    cents: u64,
    sku: String,
    qty: u32,
}

const ORDER: Workflow<Order, String> = Workflow::new("order");
const APPROVED: Signal<bool> = Signal::new("approved");

async fn order(ctx: Ctx, order: Order) -> Result<String, Failure> {
    let saga = Saga::new(&ctx);
    let s = saga.clone();
    let c = ctx.clone();
    saga.run(async move {
        let cents = order.cents;
        let charge = s
            .step("charge", move |step| async move {
                if cents > 100_000 {
                    return Err(StepError::fatal("declined: over the card's limit"));
                }
                Ok(format!("charge-{}", step.key()))
            })
            .compensate("refund", |charge: String, _| async move {
                println!("refunded {charge}");
                Ok(())
            })
            .await?;
        let (sku, qty) = (order.sku.clone(), order.qty);
        s.step("reserve", move |_| {
            let sku = sku.clone();
            async move { Ok(format!("{qty} x {sku}")) }
        })
        .compensate("release", |items: String, _| async move {
            println!("released {items}");
            Ok(())
        })
        .await?;
        let approved = c
            .wait_for(&APPROVED)
            .timeout(Duration::from_secs(24 * 3600))
            .await?;
        if approved != Some(true) {
            return Err(Failure::with_kind("refused", "the order was not approved"));
        }
        let tracking = s
            .step("ship", |step| async move {
                Ok(format!("TRACK-{}", &step.key()[..8]))
            })
            .await?;
        Ok(format!("{charge} shipped as {tracking}"))
    })
    .await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Engine::open(Config::memory()).await?;
    engine.register(ORDER, order);
    for (i, cents) in [(1, 1_999), (2, 4_500), (3, 250_000)] {
        let o = Order {
            cents,
            sku: "tea".into(),
            qty: i,
        };
        engine.start(ORDER, &format!("order-{i}"), &o).await?;
    }
    let addr =
        std::env::var("FUSEE_CONSOLE_ADDR").unwrap_or_else(|_| fusee_server::DEFAULT_ADDR.into());
    let mut server = fusee_server::Server::new(engine.clone()).bind(addr.parse()?);
    if let (Ok(admin), Ok(read)) = (
        std::env::var("FUSEE_ADMIN_TOKEN"),
        std::env::var("FUSEE_READ_TOKEN"),
    ) {
        server = server.admin_token(admin).read_token(read);
    }
    let server = server.start().await?;
    println!("console at {}/ (Ctrl-C to stop)", server.url());
    match std::env::var("FUSEE_CONSOLE_EXIT_AFTER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    server.stop().await?;
    engine.close().await?;
    Ok(())
}
