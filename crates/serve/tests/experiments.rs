//! Live A/B experiments in the server end to end on loopback, with scripted models: each
//! viewer served from their arm, outcomes attributed, another model in an arm, a failing arm,
//! and experiments and the harness history surviving a restart.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// A live experiment over two harness versions: each viewer is answered by their arm's
/// version (and always the same one), outcome events are attributed to that arm, the report
/// compares the arms, an unknown viewer's outcome is refused, and stopping returns every
/// viewer to the active version.
#[test]
fn a_live_experiment_serves_each_viewer_from_their_arm_and_attributes_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "demo");
    let zoe = renamed_harness(dir.path(), "Zoe");
    let mia_hash = get(&r.url("/v1/harness")).1["active"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": zoe}));
    assert_eq!(code, 200, "{v}");
    let zoe_hash = v["active"].as_str().unwrap().to_string();
    let (code, _) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": mia_hash}),
    );
    assert_eq!(code, 200);

    let exp = json!({"name": "mia-vs-zoe", "seed": 5, "arms": [
        {"name": "mia", "harness": mia_hash}, {"name": "zoe", "harness": &zoe_hash[..20]}]});
    let (code, v) = json("POST", &r.url("/v1/experiments"), &exp);
    assert_eq!(code, 201, "{v}");
    assert_eq!(v["arms"][1]["harness"], zoe_hash.as_str());
    // one experiment at a time
    let (code, _) = json("POST", &r.url("/v1/experiments"), &exp);
    assert_eq!(code, 400);

    let ask_with = |viewer: &str, text: &str| -> Value {
        let (code, v) = json(
            "POST",
            &r.url("/v1/streams/demo/events?wait=true"),
            &json!({"type": "comment", "viewer": viewer, "text": text}),
        );
        assert_eq!(code, 200, "{v}");
        v["results"][0].clone()
    };
    let ask_as = |viewer: &str| ask_with(viewer, "hello");
    let mut arm_of = std::collections::HashMap::new();
    for i in 0..24 {
        let viewer = format!("viewer{i}");
        let reply = ask_as(&viewer);
        let h = reply["harness"].as_str().unwrap().to_string();
        let persona = if h == zoe_hash { "Zoe" } else { "Mia" };
        assert!(reply["text"].as_str().unwrap().contains(persona), "{reply}");
        arm_of.insert(viewer, h);
    }
    let zoes: Vec<&String> = arm_of
        .iter()
        .filter(|(_, h)| **h == zoe_hash)
        .map(|(v, _)| v)
        .collect();
    assert!(!zoes.is_empty() && zoes.len() < 24, "{} of 24", zoes.len());
    // the same viewer stays in their arm
    assert_eq!(ask_as("viewer0")["harness"], arm_of["viewer0"].as_str());

    // outcomes: every Zoe viewer buys for 100, nobody else does
    let events: Vec<Value> = zoes
        .iter()
        .flat_map(|v| {
            [
                json!({"viewer": v, "type": "page_view"}),
                json!({"viewer": v, "type": "purchase", "amount": 100.0}),
            ]
        })
        .collect();
    let (code, v) = json("POST", &r.url("/v1/outcomes"), &json!({"events": events}));
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["by_arm"]["zoe"], zoes.len() * 2);
    // an unknown viewer refuses the whole request, naming the event
    let (code, v) = json(
        "POST",
        &r.url("/v1/outcomes"),
        &json!({"events": [{"viewer": "viewer1", "type": "page_view"},
                           {"viewer": "stranger", "type": "page_view"}]}),
    );
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["error"]["field"], "events[1].viewer");
    let (code, v) = json(
        "POST",
        &r.url("/v1/outcomes"),
        &json!({"viewer": "viewer1", "type": "purchase"}),
    );
    assert_eq!(code, 400, "{v}");

    // compliance: the platform flags one reply of each Mia viewer; the hooks catch the
    // scripted model's "best deal" drafts for every Zoe viewer
    let mias: Vec<&String> = arm_of
        .iter()
        .filter(|(_, h)| **h != zoe_hash)
        .map(|(v, _)| v)
        .collect();
    let flags: Vec<Value> = mias
        .iter()
        .map(|v| json!({"viewer": v, "type": "incident"}))
        .collect();
    assert_eq!(
        json("POST", &r.url("/v1/outcomes"), &json!({ "events": flags })).0,
        200
    );
    for z in &zoes {
        let reply = ask_with(z, "what is the best deal?");
        assert!(!reply["text"].as_str().unwrap().contains("best"), "{reply}");
    }

    let (_, list) = get(&r.url("/v1/experiments"));
    assert_eq!(list["running"], "mia-vs-zoe");
    let report = &list["experiments"][0]["report"];
    let metric = |name: &str| {
        report["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == name)
            .unwrap_or_else(|| panic!("no {name} in {report}"))["comparisons"][0]["comparison"]
            .clone()
    };
    assert_eq!(metric("compliance_incidents")["mean_a"], 1.0);
    assert_eq!(metric("compliance_incidents")["mean_b"], 0.0);
    assert_eq!(metric("caught_by_hooks")["mean_a"], 0.0);
    assert_eq!(metric("caught_by_hooks")["mean_b"], 1.0);
    let gmv = report["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "gmv")
        .unwrap();
    let c = &gmv["comparisons"][0]["comparison"];
    assert_eq!(c["mean_a"], 0.0);
    assert_eq!(c["mean_b"], 100.0);
    assert_eq!(c["n_b"], zoes.len());
    assert_eq!(c["n_a"], 24 - zoes.len());

    let (code, _) = json(
        "POST",
        &r.url("/v1/experiments/mia-vs-zoe/stop"),
        &json!({}),
    );
    assert_eq!(code, 200);
    for z in zoes.iter().take(3) {
        assert_eq!(ask_as(z)["harness"], mia_hash.as_str());
    }
    let (_, list) = get(&r.url("/v1/experiments"));
    assert!(list["running"].is_null());
    assert!(list["experiments"][0]["stopped_at"].is_f64());
    r.stop();
}

/// Issue 12: the harness history lived in memory only, so a restart silently rolled back an
/// operator's live change, forgot every version to roll back to, and stopped a running
/// experiment whose arms were no longer loaded.
#[test]
fn the_harness_history_the_active_version_and_experiments_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let mia_hash = get(&r.url("/v1/harness")).1["active"]
        .as_str()
        .unwrap()
        .to_string();
    let zoe = renamed_harness(dir.path(), "Zoe");
    let ann = renamed_harness(dir.path(), "Ann");
    let (_, v) = json("POST", &r.url("/v1/harness"), &json!({"path": ann}));
    let ann_hash = v["active"].as_str().unwrap().to_string();
    let (_, v) = json("POST", &r.url("/v1/harness"), &json!({"path": zoe}));
    let zoe_hash = v["active"].as_str().unwrap().to_string();
    let exp = json!({"name": "mia-vs-zoe", "arms": [
        {"name": "mia", "harness": mia_hash}, {"name": "zoe", "harness": zoe_hash}]});
    assert_eq!(json("POST", &r.url("/v1/experiments"), &exp).0, 201);
    r.stop();

    // the Ann version's folder changes while the server is down: it cannot come back
    let t = ann.join("harness.toml");
    let text = std::fs::read_to_string(&t).unwrap();
    std::fs::write(&t, text.replace("name = \"Ann\"", "name = \"Bea\"")).unwrap();

    // a plain restart: same --harness, same data folder
    let r = start(config(dir.path()), Duration::ZERO);
    let (_, h) = get(&r.url("/v1/harness"));
    assert_eq!(h["active"], zoe_hash.as_str(), "{h}");
    let hashes: Vec<&str> = h["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["hash"].as_str().unwrap())
        .collect();
    assert_eq!(hashes, [mia_hash.as_str(), zoe_hash.as_str()], "{h}");
    assert!(!hashes.contains(&ann_hash.as_str()));
    let (_, list) = get(&r.url("/v1/experiments"));
    assert_eq!(list["running"], "mia-vs-zoe", "{list}");
    let (code, _) = json(
        "POST",
        &r.url("/v1/harness/rollback"),
        &json!({"hash": mia_hash}),
    );
    assert_eq!(code, 200);
    r.stop();

    // a restart on another harness: it becomes active, the history stays for rollbacks
    let ann_now = hat_harness::Harness::load(&ann).unwrap().hash;
    let r = start_with(
        config(dir.path()),
        Box::new(common::Scripted {
            delay: Duration::ZERO,
        }),
        &ann,
    );
    let (_, h) = get(&r.url("/v1/harness"));
    assert_eq!(h["active"], ann_now.as_str(), "{h}");
    assert_eq!(h["versions"].as_array().unwrap().len(), 3, "{h}");
    r.stop();
}

/// A second model for experiment arms: the scripted host, signing every reply.
struct Signed(common::Scripted);

impl hat_agent::episode::ChatModel for Signed {
    fn complete(
        &mut self,
        messages: &[hat_harness::Message],
    ) -> Result<String, hat_agent::AgentError> {
        let text = self.0.complete(messages)?;
        Ok(if text.contains("<tool_call>") {
            text
        } else {
            format!("{text} (model B)")
        })
    }
}

/// Issue 12: an arm is a model and a harness version; live experiments could only compare
/// harness versions, with the server's one model.
#[test]
fn a_live_experiment_can_put_another_model_in_an_arm() {
    let dir = tempfile::tempdir().unwrap();
    let version = hat_serve::load_dir(&harness_dir(), "livestream".into()).unwrap();
    let hash = version.hash().to_string();
    let b: Box<dyn hat_agent::episode::ChatModel + Send> = Box::new(Signed(common::Scripted {
        delay: Duration::ZERO,
    }));
    let server = hat_serve::Server::start_with_arm_models(
        config(dir.path()),
        Box::new(common::Scripted {
            delay: Duration::ZERO,
        }),
        vec![("model-b".into(), b)],
        version,
    )
    .unwrap();
    let r = Running::from(server.spawn(([127, 0, 0, 1], 0).into()).unwrap());
    create(&r, "demo");
    let (_, list) = get(&r.url("/v1/experiments"));
    assert_eq!(list["models"][1], "model-b", "{list}");

    let exp = |model: &str| {
        json!({"name": "a-vs-b", "arms": [
            {"name": "a", "harness": hash}, {"name": "b", "harness": hash, "model": model}]})
    };
    let (code, v) = json("POST", &r.url("/v1/experiments"), &exp("nope"));
    assert_eq!(code, 400, "{v}");
    assert_eq!(v["error"]["field"], "arms[1].model", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--arm-model"),
        "{v}"
    );
    let (code, v) = json("POST", &r.url("/v1/experiments"), &exp("model-b"));
    assert_eq!(code, 201, "{v}");

    let mut by_model = [0, 0];
    for i in 0..24 {
        let (code, v) = json(
            "POST",
            &r.url("/v1/streams/demo/events?wait=true"),
            &json!({"type": "comment", "viewer": format!("v{i}"), "text": "hello"}),
        );
        assert_eq!(code, 200, "{v}");
        let text = v["results"][0]["text"].as_str().unwrap();
        by_model[usize::from(text.ends_with("(model B)"))] += 1;
    }
    assert!(by_model[0] > 0 && by_model[1] > 0, "{by_model:?}");
    let (_, list) = get(&r.url("/v1/experiments"));
    let arms = &list["experiments"][0]["report"]["arms"];
    assert_eq!(arms[1]["model"], "model-b", "{list}");
    assert_eq!(
        arms[0]["viewers"].as_u64().unwrap() + arms[1]["viewers"].as_u64().unwrap(),
        24
    );
    assert_eq!(arms[1]["viewers"], by_model[1], "{list}");
    r.stop();
}

/// A model that always fails.
struct Broken;

impl hat_agent::episode::ChatModel for Broken {
    fn complete(
        &mut self,
        _messages: &[hat_harness::Message],
    ) -> Result<String, hat_agent::AgentError> {
        Err(hat_agent::AgentError::Model("out of memory".into()))
    }
}

/// Review finding: one arm's model failing failed every reply of the batch, the other arm's
/// and other streams' included.
#[test]
fn a_failing_arm_model_fails_only_its_own_replies() {
    let dir = tempfile::tempdir().unwrap();
    let version = hat_serve::load_dir(&harness_dir(), "livestream".into()).unwrap();
    let hash = version.hash().to_string();
    let mut cfg = config(dir.path());
    cfg.max_batch = 8;
    let server = hat_serve::Server::start_with_arm_models(
        cfg,
        Box::new(common::Scripted {
            delay: Duration::from_millis(20),
        }),
        vec![("broken".into(), Box::new(Broken) as Box<_>)],
        version,
    )
    .unwrap();
    let r = Running::from(server.spawn(([127, 0, 0, 1], 0).into()).unwrap());
    let exp = json!({"name": "ok-vs-broken", "unit": "stream", "arms": [
        {"name": "ok", "harness": hash}, {"name": "broken", "harness": hash, "model": "broken"}]});
    assert_eq!(json("POST", &r.url("/v1/experiments"), &exp).0, 201);
    // streams are the unit: post to many streams at once so both arms share batches
    let names: Vec<String> = (0..12).map(|i| format!("s{i}")).collect();
    for n in &names {
        create(&r, n);
    }
    let handles: Vec<_> = names
        .iter()
        .map(|n| {
            let url = r.url(&format!("/v1/streams/{n}/events?wait=true"));
            std::thread::spawn(move || {
                json(
                    "POST",
                    &url,
                    &json!({"type": "comment", "viewer": "v", "text": "hello"}),
                )
                .1["results"][0]
                    .clone()
            })
        })
        .collect();
    let results: Vec<Value> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let replies = results.iter().filter(|v| v["type"] == "reply").count();
    let errors: Vec<&Value> = results.iter().filter(|v| v["type"] == "error").collect();
    assert!(replies > 0 && !errors.is_empty(), "{results:?}");
    assert_eq!(replies + errors.len(), 12, "{results:?}");
    for e in errors {
        assert!(
            e["message"].as_str().unwrap().contains("out of memory"),
            "{e}"
        );
    }
    r.stop();
}
