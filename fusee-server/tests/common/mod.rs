//! What the server's tests share: an engine with an order-saga-like
//! workflow (a step, a wait for an approval signal, a step), a one-step
//! workflow, and a server on a free loopback port with both tokens.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use fusee::{Config, Ctx, Engine, Failure, Query, Signal, Update, Workflow};
use fusee_server::{Client, Server, ServerHandle};
use serde::{Deserialize, Serialize};

pub const ADMIN: &str = "admin-token-for-tests";
pub const READ: &str = "read-token-for-tests";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Order {
    pub sku: String,
    pub cents: u64,
}

pub const ORDER: Workflow<Order, String> = Workflow::new("order");
pub const ECHO: Workflow<serde_json::Value, serde_json::Value> = Workflow::new("echo");
pub const APPROVED: Signal<bool> = Signal::new("approved");
pub const NOTE: Update<String, usize> = Update::new("note");
pub const STAGE: Query<(), String> = Query::new("stage");

/// The order saga: charge, wait (an hour at most) for approval, ship.
/// Refused approval fails the run. Takes notes (an update, refused when
/// empty) and answers where it is (a query).
pub async fn order(ctx: Ctx, order: Order) -> Result<String, Failure> {
    let notes = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
    let stage = std::rc::Rc::new(std::cell::RefCell::new("charging".to_string()));
    {
        let notes = notes.clone();
        ctx.on_update_validated(
            NOTE,
            |n: &String| {
                if n.is_empty() {
                    Err("a note must not be empty".to_string())
                } else {
                    Ok(())
                }
            },
            move |n: String| {
                let notes = notes.clone();
                async move {
                    notes.borrow_mut().push(n);
                    Ok::<_, Failure>(notes.borrow().len())
                }
            },
        );
        let stage = stage.clone();
        ctx.on_query(STAGE, move |()| Ok(stage.borrow().clone()));
    }
    let cents = order.cents;
    let charge = ctx
        .step(
            "charge",
            move |_| async move { Ok(format!("charged {cents}")) },
        )
        .await?;
    *stage.borrow_mut() = "waiting for approval".into();
    let approved = ctx
        .wait_for(&APPROVED)
        .timeout(Duration::from_secs(3600))
        .await?;
    if approved != Some(true) {
        return Err(Failure::with_kind("refused", "the order was not approved"));
    }
    *stage.borrow_mut() = "shipping".into();
    let sku = order.sku.clone();
    let shipped = ctx
        .step("ship", move |_| {
            let sku = sku.clone();
            async move { Ok(format!("shipped {sku}")) }
        })
        .await?;
    Ok(format!("{charge}; {shipped}"))
}

/// One step returning its input.
pub async fn echo(ctx: Ctx, v: serde_json::Value) -> Result<serde_json::Value, Failure> {
    ctx.step("echo", move |_| {
        let v = v.clone();
        async move { Ok(v) }
    })
    .await
    .map_err(Failure::from)
}

/// A memory engine with both workflows registered.
pub async fn engine() -> Engine {
    engine_with(Config::memory()).await
}

pub async fn engine_with(config: Config) -> Engine {
    let engine = Engine::open(config).await.expect("open");
    engine.register(ORDER, order);
    engine.register(ECHO, echo);
    engine
}

/// A server of `engine` on a free loopback port with both tokens.
pub async fn serve(engine: &Engine) -> ServerHandle {
    Server::new(engine.clone())
        .bind("127.0.0.1:0".parse().expect("addr"))
        .admin_token(ADMIN)
        .read_token(READ)
        .start()
        .await
        .expect("server starts")
}

/// An engine, its server, and an admin client of it.
pub async fn setup() -> (Engine, ServerHandle, Client) {
    let engine = engine().await;
    let server = serve(&engine).await;
    let client = Client::new(&server.url()).expect("url").token(ADMIN);
    (engine, server, client)
}

/// A raw request (for what the client would not send), with a token.
pub async fn raw(
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.expect("body");
    let v = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, v)
}
