//! A cart workflow the update tests share: `add` prices an item in a step
//! (counted in `priced`) and returns how many items the cart holds, `big`
//! returns a result over a 1 KiB payload limit, `go` ends the run with
//! its items.

// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use fusee::{Ctx, Engine, Failure, Signal, Update, Workflow};

pub(crate) const CART: Workflow<(), Vec<String>> = Workflow::new("cart");
pub(crate) const ADD: Update<String, usize> = Update::new("add");
pub(crate) const BIG: Update<(), String> = Update::new("big");
pub(crate) const GO: Signal<()> = Signal::new("go");

/// Registers [`CART`].
pub(crate) fn register_cart(engine: &Engine, priced: &Arc<AtomicU32>) {
    let priced = Arc::clone(priced);
    engine.register(CART, move |ctx: Ctx, ()| {
        let priced = Arc::clone(&priced);
        async move {
            let items = std::rc::Rc::new(std::cell::RefCell::new(Vec::<String>::new()));
            let held = std::rc::Rc::clone(&items);
            let c = ctx.clone();
            ctx.on_update(ADD, move |item: String| {
                let (held, c, priced) = (std::rc::Rc::clone(&held), c.clone(), Arc::clone(&priced));
                async move {
                    c.step("price", move |_| {
                        let priced = Arc::clone(&priced);
                        async move {
                            priced.fetch_add(1, Ordering::SeqCst);
                            Ok(())
                        }
                    })
                    .await?;
                    held.borrow_mut().push(item);
                    Ok(held.borrow().len())
                }
            });
            ctx.on_update(BIG, |()| async move { Ok("x".repeat(2048)) });
            ctx.wait_for(&GO).await?;
            let done = items.borrow().clone();
            Ok::<_, Failure>(done)
        }
    });
}
