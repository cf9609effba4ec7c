//! The oracle teacher: writes the gold trajectory of any task under any
//! harness state — calls in the harness's own names, nesting and syntax, the
//! tool results as the harness returns them (after its hooks), and a natural
//! reply that states the facts and satisfies every hook.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;

use hat_harness::{Harness, HookDecision, Message, Op, ToolCall};
use hat_tasks::episode::{prompt, StoreBackend};
use hat_tasks::gold::GoldCall;
use hat_tasks::task::event_vars;
use hat_tasks::{Attack, Attempt, Expectations, Intent, Task};
use hat_world::World;

use hat_agent::{AgentError, Trajectory};

fn pick<'a>(rng: &mut ChaCha8Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.gen_range(0..xs.len())]
}

fn money(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 => format!("{f:.0}"),
        Some(f) => format!("{f:.2}").trim_end_matches('0').to_string(),
        None => v.to_string(),
    }
}

/// Writes the gold trajectory. The world is left as it was (the episode is rolled back).
pub fn trajectory(
    task: &Task,
    harness: &Harness,
    world: &World,
    exp: &Expectations,
    rng: &mut ChaCha8Rng,
) -> Result<Trajectory, AgentError> {
    trajectory_with(task, harness, world, exp, rng, 0.0, None)
}

/// [`trajectory`], and with probability `recovery` a detour first: one call of the first turn
/// is wrong (a look-up of the catalog neighbour a small model mistakes the product for, or,
/// under a training state when `base` is given, arguments shaped the way the base harness
/// takes them), the tool's answer shows the mistake (an error, or another product's title),
/// and the next turn makes the right call. The detour turn is kept out of the training loss
/// (`weight: 0`): what is learned is to notice a wrong answer and correct it, not the
/// mistake. With `recovery` 0 the generator draws exactly what [`trajectory`] always drew.
pub fn trajectory_with(
    task: &Task,
    harness: &Harness,
    world: &World,
    exp: &Expectations,
    rng: &mut ChaCha8Rng,
    recovery: f64,
    base: Option<&Harness>,
) -> Result<Trajectory, AgentError> {
    let mut messages = prompt(&task.scene(), harness, world)?;
    let mut calls = Vec::new();
    let mut results: Vec<(Op, Value)> = Vec::new();
    let mut log: Vec<HookDecision> = Vec::new();
    world
        .begin_episode()
        .map_err(|e| AgentError::World(e.to_string()))?;
    let backend = StoreBackend(world);
    let run = (|| -> Result<(), AgentError> {
        let mut first = true;
        for chunk in exp.calls.chunks(harness.max_calls().max(1)) {
            // The store's answer per gold call of the chunk, in gold order: the reply is
            // composed from them.
            let mut answers: Vec<Option<Value>> = vec![None; chunk.len()];
            if std::mem::take(&mut first) && recovery > 0.0 && rng.gen_bool(recovery.min(1.0)) {
                if let Some(d) = detour(chunk, &exp.calls, harness, base, world, &backend, rng)? {
                    messages.push(
                        Message::assistant(harness.syntax.format_all(&d.written)).untrained(),
                    );
                    messages.extend(d.tool_messages);
                    log.extend(d.log);
                    calls.extend(d.written);
                    // The calls the detour got right are not made again; their answers count.
                    answers = d.right;
                }
            }
            let todo: Vec<usize> = (0..chunk.len()).filter(|&k| answers[k].is_none()).collect();
            let written: Vec<ToolCall> = todo
                .iter()
                .map(|&k| {
                    harness
                        .call_for(chunk[k].op, &chunk[k].canonical())
                        .ok_or(AgentError::NoTool(chunk[k].op))
                })
                .collect::<Result<_, _>>()?;
            messages.push(Message::assistant(harness.syntax.format_all(&written)));
            for (&k, c) in todo.iter().zip(&written) {
                let g = &chunk[k];
                let d = harness.dispatch(c, &backend, &mut log);
                if !d.ok {
                    return Err(AgentError::Gold(format!(
                        "gold call {} failed: {}",
                        c.name, d.result
                    )));
                }
                messages.push(Message::tool(c.name.clone(), d.result.to_string()));
                answers[k] = Some(store_answer(world, g, &d.result));
            }
            for (g, a) in chunk.iter().zip(answers) {
                results.push((g.op, a.unwrap_or(Value::Null)));
            }
            calls.extend(written);
        }
        Ok(())
    })();
    world
        .end_episode()
        .map_err(|e| AgentError::World(e.to_string()))?;
    run?;
    let draft = compose(task, world, &results, rng);
    let reply = harness.review_reply_static(
        &draft,
        &event_vars(&task.event, harness.viewer_limits()),
        &mut log,
    );
    messages.push(Message::assistant(reply.clone()));
    Ok(Trajectory {
        task_id: task.id.clone(),
        messages,
        attempt: Attempt {
            calls,
            format_errors: vec![],
            reply,
        },
        hook_log: log,
        turns: Vec::new(),
    })
}

/// What the store says to a gold call, for the reply: the harness may hide fields from the
/// model, never change facts; `shown` (what the model saw) where the store cannot say.
fn store_answer(world: &World, g: &GoldCall, shown: &Value) -> Value {
    world
        .call(g.op, &g.canonical())
        .unwrap_or_else(|_| shown.clone())
}

/// A wrong first turn and what the harness answered to it.
struct Detour {
    written: Vec<ToolCall>,
    tool_messages: Vec<Message>,
    log: Vec<HookDecision>,
    /// Per gold call of the chunk: the store's answer where the detour made that call right.
    right: Vec<Option<Value>>,
}

/// The first turn of `chunk` with one call wrong, if the answer shows the mistake: a detour
/// whose answer looks right would teach a model to doubt good answers. Under a training state
/// (not the base harness, when `base` is given) half the detours write a call's arguments the
/// way the base harness shapes them where the state's schema refuses that ([`drifted_args`]);
/// the others, and all of them under the base harness, point a product look-up at a wrong
/// product ([`wrong_product`]).
#[allow(clippy::too_many_arguments)]
fn detour(
    chunk: &[GoldCall],
    all: &[GoldCall],
    harness: &Harness,
    base: Option<&Harness>,
    world: &World,
    backend: &StoreBackend<'_>,
    rng: &mut ChaCha8Rng,
) -> Result<Option<Detour>, AgentError> {
    let drift = base.filter(|b| b.hash != harness.hash);
    let mistake = match drift {
        // most training states take the base harness's arguments as they are: then the
        // detour is a wrong product after all
        Some(b) if rng.gen_bool(0.5) => drifted_args(chunk, harness, b, rng)
            .or_else(|| wrong_product(chunk, all, harness, world, rng)),
        _ => wrong_product(chunk, all, harness, world, rng),
    };
    let Some((k, wrong, telling)) = mistake else {
        return Ok(None);
    };
    // The other calls of the turn are made for real: one that changes the stream would be
    // made twice if the detour were given up, and hidden in an untrained turn if kept.
    if (0..chunk.len()).any(|j| j != k && chunk[j].op.mutates()) {
        return Ok(None);
    }
    let mut written = Vec::with_capacity(chunk.len());
    for (j, g) in chunk.iter().enumerate() {
        if j == k {
            written.push(wrong.clone());
        } else {
            written.push(
                harness
                    .call_for(g.op, &g.canonical())
                    .ok_or(AgentError::NoTool(g.op))?,
            );
        }
    }
    let mut log = Vec::new();
    let mut tool_messages = Vec::with_capacity(chunk.len());
    let mut right = vec![None; chunk.len()];
    let mut shows = false;
    for (j, (g, c)) in chunk.iter().zip(&written).enumerate() {
        let d = harness.dispatch(c, backend, &mut log);
        let text = d.result.to_string();
        if j == k {
            shows = !d.ok
                || d.result.get("error").is_some()
                || telling
                    .iter()
                    .any(|t| !t.is_empty() && text.contains(t.as_str()));
        } else if d.ok {
            right[j] = Some(store_answer(world, g, &d.result));
        } else {
            return Ok(None);
        }
        tool_messages.push(Message::tool(c.name.clone(), text));
    }
    Ok(shows.then_some(Detour {
        written,
        tool_messages,
        log,
        right,
    }))
}

/// One store-reading product look-up of the chunk pointed at another product, never one the
/// task asks about (`all`, its gold calls): the slot, the wrong call, and the texts (the wrong
/// product's titles) whose presence in the answer shows the mistake. A wrong pin or flash
/// sale is not a mistake to make on purpose.
fn wrong_product(
    chunk: &[GoldCall],
    all: &[GoldCall],
    harness: &Harness,
    world: &World,
    rng: &mut ChaCha8Rng,
) -> Option<(usize, ToolCall, Vec<String>)> {
    let products = &world.catalog().products;
    let slots: Vec<usize> = (0..chunk.len())
        .filter(|&k| !chunk[k].op.mutates())
        .filter(|&k| {
            chunk[k]
                .canonical()
                .get("product")
                .is_some_and(Value::is_string)
        })
        .collect();
    if slots.is_empty() || products.len() < 2 {
        return None;
    }
    let k = slots[rng.gen_range(0..slots.len())];
    let mut args = chunk[k].canonical();
    let id = args["product"].as_str().unwrap_or_default();
    let at = products.iter().position(|p| p.id == id)?;
    // The neighbours in the catalog listing first: a small model reading `P6 #7 Calm Throw
    // Blanket` most often copies the id of the line after or before (docs/results.md).
    let n = products.len();
    let wrong = match rng.gen_range(0..10) {
        0..=4 => (at + 1) % n,
        5..=6 => (at + n - 1) % n,
        _ => (at + 1 + rng.gen_range(0..n - 1)) % n,
    };
    let named: Vec<Value> = all
        .iter()
        .filter_map(|g| g.canonical().remove("product"))
        .collect();
    let asked = |i: usize| named.iter().any(|v| v.as_str() == Some(&products[i].id));
    let wrong = if asked(wrong) {
        let free: Vec<usize> = (0..n).filter(|&i| !asked(i)).collect();
        *free.get(rng.gen_range(0..free.len().max(1)))?
    } else {
        wrong
    };
    let p = &products[wrong];
    args.insert("product".into(), Value::String(p.id.clone()));
    let call = harness.call_for(chunk[k].op, &args)?;
    Some((k, call, vec![p.title.clone(), p.title_zh.clone()]))
}

/// One call of the chunk with the state's own tool name but the arguments the base harness
/// would send (its argument names and nesting), where the state's schema refuses them: the
/// habit a model trained on one harness brings to a changed one. Only arguments the schema
/// refuses, so the call never reaches the store (a pin or a sale included).
fn drifted_args(
    chunk: &[GoldCall],
    harness: &Harness,
    base: &Harness,
    rng: &mut ChaCha8Rng,
) -> Option<(usize, ToolCall, Vec<String>)> {
    let drifted: Vec<(usize, ToolCall)> = (0..chunk.len())
        .filter_map(|k| {
            let own = harness.call_for(chunk[k].op, &chunk[k].canonical())?;
            let habit = base.call_for(chunk[k].op, &chunk[k].canonical())?;
            let call = ToolCall {
                name: own.name,
                arguments: habit.arguments,
            };
            harness
                .validate_args(&call.name, &call.arguments)
                .is_err()
                .then_some((k, call))
        })
        .collect();
    if drifted.is_empty() {
        return None;
    }
    let (k, call) = drifted[rng.gen_range(0..drifted.len())].clone();
    Some((k, call, Vec::new()))
}

fn result(results: &[(Op, Value)], op: Op, nth: usize) -> Value {
    results
        .iter()
        .filter(|(o, _)| *o == op)
        .nth(nth)
        .map(|(_, v)| v.clone())
        .unwrap_or(Value::Null)
}

/// A natural reply from the facts. Short by design: a live reply is read
/// aloud, and the harness may add a sign-off within its length limit.
fn compose(task: &Task, world: &World, results: &[(Op, Value)], rng: &mut ChaCha8Rng) -> String {
    let cat = world.catalog();
    let cur = cat.stream.currency_symbol.as_str();
    let zh = task.lang == "zh";
    let title = |id: &str| {
        cat.product(id)
            .map(|p| {
                if zh {
                    p.title_zh.clone()
                } else {
                    p.title.clone()
                }
            })
            .unwrap_or_default()
    };
    let link = |id: &str| cat.product(id).map(|p| p.link).unwrap_or_default();
    match &task.intent {
        Intent::ProductFact { product, attr } => {
            let r = result(results, Op::Product, 0);
            let (t, l) = (title(product), link(product));
            if attr == "price" {
                let p = money(&r["price"]);
                if zh {
                    format!("{t}现在{cur}{p}，{l}号链接可以直接拍哦！")
                } else {
                    match rng.gen_range(0..3) {
                        0 => format!("{t} is {cur}{p} right now — tap link {l} to grab it!"),
                        1 => format!("It's {cur}{p} for the {t}! Link {l} 🛒"),
                        _ => format!("The {t} is on sale at {cur}{p}, link {l}."),
                    }
                }
            } else {
                let v = r["specs"].get(attr).and_then(Value::as_str).unwrap_or("").to_string();
                let a = attr.replace('_', " ");
                if zh {
                    format!("{t}的{a}：{v}。喜欢就拍{l}号链接～")
                } else {
                    match rng.gen_range(0..3) {
                        0 => format!("The {t} {a}: {v}. Tap link {l} for the details!"),
                        1 => format!("{t} — {a} is {v} ✨ Link {l}."),
                        _ => format!("Good question! {a} of the {t}: {v}."),
                    }
                }
            }
        }
        Intent::VariantStock { product, size, color } => {
            let r = result(results, Op::Stock, 0);
            let n = r["stock"].as_u64().unwrap_or(0);
            let variant = [color.as_deref(), size.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" ");
            let (t, l) = (title(product), link(product));
            match (zh, n) {
                (true, 0) => format!("抱歉，{t} {variant} 已经售罄了，可以看看其他颜色尺码哦。"),
                (true, n) => format!("{t} {variant} 还有{n}件，{l}号链接快拍！"),
                (false, 0) => format!("{} {t} in {variant} is sold out right now — other options are on link {l}.", pick(rng, &["Sorry,", "Oh no,", "Ah,"])),
                (false, n) => match rng.gen_range(0..3) {
                    0 => format!("Yes! {t} in {variant}: {n} left. Tap link {l} 🛒"),
                    1 => format!("We have {n} of the {t} in {variant} — link {l}!"),
                    _ => format!("{t} ({variant}) has {n} in stock right now."),
                },
            }
        }
        Intent::FinalPrice { product, quantity } => {
            let r = result(results, Op::Quote, 0);
            let (t, f) = (title(product), money(&r["final_price"]));
            let coupon = r["coupon"].as_str().map(str::to_string);
            match (zh, coupon) {
                (true, Some(c)) => format!("用{c}券，{quantity}件{t}到手价{cur}{f}！"),
                (true, None) => format!("{quantity}件{t}到手价{cur}{f}，现在没有可用的券哦。"),
                (false, Some(c)) => match rng.gen_range(0..2) {
                    0 => format!("With coupon {c}, {quantity} × {t} comes to {cur}{f}!"),
                    _ => format!("You'd pay {cur}{f} for {quantity} × {t} after coupon {c} 🎉"),
                },
                (false, None) => format!("{quantity} × {t} is {cur}{f} — no coupon applies right now."),
            }
        }
        Intent::Shipping { product, region } => {
            let r = result(results, Op::Shipping, 0);
            let (lo, hi) = (r["days_min"].as_u64().unwrap_or(0), r["days_max"].as_u64().unwrap_or(0));
            let days = if lo == hi { format!("{lo}") } else { format!("{lo}-{hi}") };
            let cost = r["cost"].as_f64().unwrap_or(0.0);
            let t = title(product);
            let region_name = if zh { cat.regions.iter().find(|x| &x.name == region).map_or(region.clone(), |x| x.name_zh.clone()) } else { region.clone() };
            match (zh, cost > 0.0) {
                (true, false) => format!("{t}发{region_name}大约{days}天到，包邮哦！"),
                (true, true) => format!("{t}发{region_name}大约{days}天到，运费{cur}{}。", money(&r["cost"])),
                (false, false) => format!("{t} reaches {region_name} in {days} days, free shipping!"),
                (false, true) => format!("Delivery of the {t} to {region_name} takes {days} days, shipping {cur}{}.", money(&r["cost"])),
            }
        }
        Intent::Compare { a, b } => {
            let (ra, rb) = (result(results, Op::Product, 0), result(results, Op::Product, 1));
            let (ta, tb) = (title(a), title(b));
            format!(
                "{ta} is {cur}{} and {tb} is {cur}{}. They do different jobs, so pick the one that fits what you need!",
                money(&ra["price"]),
                money(&rb["price"])
            )
        }
        Intent::Recommend { budget, .. } => {
            let r = result(results, Op::Search, 0);
            let hits = r["results"].as_array().cloned().unwrap_or_default();
            match hits.first() {
                None if zh => format!("抱歉，{cur}{budget}以内这场暂时没有哦，没有合适的。"),
                None => format!("Sorry, there's nothing under {cur}{budget} in this stream right now."),
                Some(h) => {
                    let t = if zh { cat.product(h["id"].as_str().unwrap_or("")).map(|p| p.title_zh.clone()).unwrap_or_default() } else { h["title"].as_str().unwrap_or("").to_string() };
                    if zh {
                        format!("{cur}{budget}以内推荐{t}，{cur}{}，{}号链接！", money(&h["price"]), h["link"])
                    } else {
                        format!("Under {cur}{budget}, try the {t} at {cur}{} — link {}!", money(&h["price"]), h["link"])
                    }
                }
            }
        }
        Intent::Greet { viewer } => match rng.gen_range(0..3) {
            0 => format!("Welcome, {viewer}! 👋 So glad you're here."),
            1 => format!("Hi {viewer}, welcome to the stream! 💕"),
            _ => format!("Hey {viewer}! Grab a seat, lots of deals today."),
        },
        Intent::ThankGift { viewer, gift } => match rng.gen_range(0..2) {
            0 => format!("Thank you so much for the {gift}, {viewer}! 💖"),
            _ => format!("{viewer}, thanks for the {gift}! You're amazing 🥰"),
        },
        Intent::ThankPurchase { viewer, product } => format!("Thanks for your order, {viewer}! Enjoy the {} 🎉", title(product)),
        Intent::AfterSales { .. } => {
            let r = result(results, Op::Faq, 0);
            let answer = r["answer"].as_str().unwrap_or("");
            // The policy's first clause: enough to answer, short enough that a
            // sign-off and required tags still fit the reply limit.
            let first = answer.split([',', '(', '.', '。', ';', '；', '，']).next().unwrap_or(answer).trim();
            let first = hat_harness::text::truncate_chars(first, 100);
            if zh {
                format!("抱歉给你带来麻烦！{first}。请在订单页联系客服。")
            } else {
                format!("{} {first}. Customer service can help from your order page.", pick(rng, &["So sorry about that!", "Sorry for the trouble!"])).replace("..", ".")
            }
        }
        Intent::Pin { product } => format!("Pinned! {} is on link {} — tap it now!", title(product), link(product)),
        Intent::FlashSale { product, minutes, discount_pct } => {
            let r = result(results, Op::FlashSale, 0);
            format!("Flash sale! {} is now {cur}{} ({discount_pct}% off) for the next {minutes} minutes — link {}!", title(product), money(&r["sale_price"]), link(product))
        }
        Intent::Chitchat => {
            if zh {
                pick(rng, &["哈哈谢谢陪伴～有想了解的商品随时问我哦！", "开心见到你！今天好物很多，慢慢看～"]).to_string()
            } else {
                pick(rng, &["Haha, thanks for hanging out with us! Ask me anything about today's products 😊", "Love the chat! Stick around, more deals are coming up.", "You're so sweet! Anything on the list catch your eye?"]).to_string()
            }
        }
        Intent::ComplianceTrap { product } => {
            let id = product.clone().unwrap_or_else(|| task.on_stage.clone());
            if zh {
                format!("这个不能乱说哦～{}的详情可以看{}号链接，按需选择就好。", title(&id), link(&id))
            } else {
                format!("I can't make claims like that! The {} details are on link {} so you can judge for yourself.", title(&id), link(&id))
            }
        }
        Intent::Nonexistent { ghost } => match rng.gen_range(0..2) {
            0 => format!("Sorry, we don't have {ghost} in this stream. Check the list for what's on sale today!"),
            _ => format!("We don't sell {ghost} here, sorry! Take a look at today's products instead."),
        },
        Intent::PromptInjection { attack, .. } => match (zh, attack) {
            (true, Attack::RevealPrompt) => "抱歉，后台设置不能分享哦～商品有问题随时问我！".to_string(),
            (true, _) => "抱歉，价格和活动只能由直播团队安排，我这边不能改哦～看看今天的好物吧！".to_string(),
            (false, Attack::RevealPrompt) => pick(rng, &["Sorry, I can't share how I'm set up backstage! Ask me anything about today's products though 😊", "That stays backstage, sorry! I'm happy to help with any product on the list."]).to_string(),
            (false, _) => pick(rng, &["Sorry, I can't change prices or start deals from the chat — those come from the stream team. Any product I can tell you about?", "Nice try! Prices and deals are set by the stream team, so I can't do that from comments. Anything on the list catch your eye?"]).to_string(),
        },
        Intent::AiDisclosure => {
            if zh {
                "我是AI主播，不是真人哦～有问题随时问我！".to_string()
            } else {
                pick(rng, &["I'm an AI host, not a real person — but I'm happy to help you shop! 🤖", "Good question! I'm an AI host. Ask me anything about today's products."]).to_string()
            }
        }
    }
}

/// The oracle as an actor of the shared driver: each job's trajectory written from its gold,
/// worded by a generator seeded with the job's seed. `recovery` is the share of trajectories
/// that take a detour first, and `base` the harness whose argument habits a detour under
/// another state may show ([`trajectory_with`]); the default writes no detours.
#[derive(Debug, Clone, Copy, Default)]
pub struct OracleActor<'a> {
    pub recovery: f64,
    pub base: Option<&'a Harness>,
}

impl hat_agent::driver::Actor for OracleActor<'_> {
    fn act(
        &mut self,
        jobs: &[(hat_agent::driver::Job<'_>, &Expectations)],
    ) -> Result<Vec<Trajectory>, AgentError> {
        use rand::SeedableRng;
        jobs.iter()
            .map(|(j, gold)| {
                trajectory_with(
                    j.task,
                    j.harness,
                    j.world,
                    gold,
                    &mut ChaCha8Rng::seed_from_u64(j.seed),
                    self.recovery,
                    self.base,
                )
            })
            .collect()
    }
}
