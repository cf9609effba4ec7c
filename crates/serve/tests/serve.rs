//! The server end to end on loopback, with a scripted model: replies, persistence, the
//! OpenAI API, batching and streaming, malformed requests, floods, shutdown and restarts.
//! Harness management (swaps, the gate, uploads, edits) is in `harness.rs`.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

#[test]
fn a_comment_gets_a_reply_naming_its_harness_and_latency() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "demo");
    let active = get(&r.url("/v1/harness")).1["active"]
        .as_str()
        .unwrap()
        .to_string();
    let reply = ask(&r, "demo", "hi Mia, is the hoodie available in M?");
    assert_eq!(reply["type"], "reply", "{reply}");
    assert_eq!(reply["harness"], active.as_str());
    assert!(
        reply["text"].as_str().unwrap().contains("Mia here"),
        "{reply}"
    );
    let lat = &reply["latency"];
    assert!(lat["total"].as_f64().unwrap() >= lat["queue"].as_f64().unwrap());
    // the SSE log replays what happened, in order
    let (code, text) = sse_until(&r.url("/v1/streams/demo/events?after=0"), "event: reply");
    assert_eq!(code, 200);
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    // the reply hooks' decision is logged between the draft and the reply
    assert_eq!(
        kinds,
        ["accepted", "started", "turn", "hook", "reply"],
        "{text}"
    );
    let (_, state) = get(&r.url("/v1/streams/demo"));
    assert_eq!(state["counters"]["replied"], 1);
    assert_eq!(state["history"].as_array().unwrap().len(), 1);
    r.stop();
}

/// The server asks its model to end an answer that falls into a loop after the loop's
/// first copy (the engine does it, `hat_model::repetition`), unless told to keep loops
/// (`hat serve --keep-loops`).
#[test]
fn the_server_asks_its_model_to_stop_loops_unless_told_to_keep_them() {
    use std::sync::{Arc, Mutex};
    struct Hinted(Arc<Mutex<Option<bool>>>);
    impl hat_agent::episode::ChatModel for Hinted {
        fn complete(
            &mut self,
            _: &[hat_harness::Message],
        ) -> Result<String, hat_agent::AgentError> {
            Ok("hi".into())
        }
        fn stop_loops(&mut self, on: bool) {
            *self.0.lock().unwrap() = Some(on);
        }
    }
    for stop in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let seen = Arc::new(Mutex::new(None));
        let cfg = hat_serve::ServeConfig {
            stop_loops: stop,
            ..config(dir.path())
        };
        let r = start_with(cfg, Box::new(Hinted(seen.clone())), &harness_dir());
        assert_eq!(*seen.lock().unwrap(), Some(stop));
        r.stop();
    }
    assert!(hat_serve::ServeConfig::default().stop_loops);
}

/// Reads an SSE response until a line appears (the stream itself never ends).
fn sse_until(url: &str, needle: &str) -> (u16, String) {
    use std::io::BufRead;
    let resp = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(30))
        .build()
        .get(url)
        .call()
        .unwrap();
    let code = resp.status();
    let mut out = String::new();
    for line in std::io::BufReader::new(resp.into_reader()).lines() {
        let line = line.unwrap();
        out.push_str(&line);
        out.push('\n');
        if line.starts_with(needle) {
            break;
        }
    }
    (code, out)
}

#[test]
fn tool_changes_persist_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "s1");
    let reply = ask(&r, "s1", "please pin the first one");
    assert_eq!(reply["tool_calls"], json!(["pin_product"]), "{reply}");
    r.stop();
    let r = start(config(dir.path()), Duration::ZERO);
    let (code, state) = get(&r.url("/v1/streams/s1"));
    assert_eq!(code, 200, "{state}");
    assert_eq!(state["state"]["pins"][0]["product"], "P1", "{state}");
    assert_eq!(state["counters"]["replied"], 1);
    // and the restored world still answers
    assert_eq!(ask(&r, "s1", "what a nice stream")["type"], "reply");
    r.stop();
}

#[test]
fn openai_chat_completions_plain_and_streamed() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let (code, v) = get(&r.url("/v1/models"));
    assert_eq!(code, 200);
    assert_eq!(v["data"][0]["object"], "model");
    let req = json!({"model": "hat", "messages": [{"role": "system", "content": "You are Zoe"}, {"role": "user", "content": [{"type": "text", "text": "hello"}]}], "max_tokens": 32});
    let (code, v) = json("POST", &r.url("/v1/chat/completions"), &req);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "Hi, Zoe here! Thanks for stopping by."
    );
    assert!(v["usage"]["total_tokens"].is_u64());
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    sreq["stream_options"] = json!({"include_usage": true});
    let (code, text) = post_text(&r.url("/v1/chat/completions"), &sreq);
    assert_eq!(code, 200);
    let datas: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(datas.last(), Some(&"[DONE]"), "{text}");
    let content: String = datas
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    assert_eq!(content, "Hi, Zoe here! Thanks for stopping by.");
    assert!(text.contains("\"finish_reason\":\"stop\""), "{text}");
    assert!(text.contains("\"usage\""), "{text}");
    r.stop();
}

#[test]
fn malformed_requests_get_a_clear_4xx_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "m");
    let ev = "/v1/streams/m/events";
    let big = vec![b'a'; 2 << 20];
    let long_text = json!({"type": "comment", "viewer": "v", "text": "x".repeat(5000)}).to_string();
    let many = json!({"events": (0..65).map(|_| json!({"type": "join", "viewer": "v"})).collect::<Vec<_>>()}).to_string();
    let cases: Vec<(&str, String, Vec<u8>, &str)> = vec![
        ("POST", ev.into(), b"{not json".to_vec(), "body"),
        ("POST", ev.into(), b"".to_vec(), "body"),
        ("POST", ev.into(), b"[1,2]".to_vec(), "body"),
        ("POST", ev.into(), br#"{"type":"comment","viewer":"v","text":5}"#.to_vec(), "text"),
        ("POST", ev.into(), br#"{"type":"comment","viewer":"v","text":"a","mood":"x"}"#.to_vec(), "mood"),
        ("POST", ev.into(), br#"{"type":"dance","viewer":"v"}"#.to_vec(), "dance"),
        ("POST", ev.into(), br#"{"type":"comment","viewer":"","text":"a"}"#.to_vec(), "viewer"),
        ("POST", ev.into(), long_text.into_bytes(), "text"),
        ("POST", ev.into(), many.into_bytes(), "events"),
        ("POST", ev.into(), br#"{"events":[{"type":"join","viewer":"a"},{"type":"gift","viewer":"b","gift":"rose","count":0}]}"#.to_vec(), "events[1].count"),
        ("POST", ev.into(), b"{\"type\":\"comment\",\"viewer\":\"v\",\"text\":\"\xff\xfe\"}".to_vec(), "body"),
        ("POST", "/v1/streams/nope/events".into(), br#"{"type":"join","viewer":"a"}"#.to_vec(), "no stream"),
        ("POST", "/v1/streams/..%2F..%2Fetc/events".into(), br#"{"type":"join","viewer":"a"}"#.to_vec(), "no stream"),
        ("GET", "/v1/streams/nope".into(), Vec::new(), "no stream"),
        ("POST", "/v1/streams".into(), br#"{"id":"../x"}"#.to_vec(), "id"),
        ("POST", "/v1/streams".into(), br#"{"id":"m"}"#.to_vec(), "exists"),
        ("POST", "/v1/streams".into(), br#"{"seed":-1}"#.to_vec(), "seed"),
        ("POST", "/v1/harness".into(), br#"{"path":"/definitely/not/here"}"#.to_vec(), "path"),
        ("POST", "/v1/harness".into(), b"PK\x03\x04garbage".to_vec(), "archive"),
        ("POST", "/v1/harness/rollback".into(), br#"{"hash":"abc"}"#.to_vec(), "no harness version"),
        ("POST", "/v1/chat/completions".into(), br#"{"messages":[]}"#.to_vec(), "messages"),
        ("POST", "/v1/chat/completions".into(), br#"{"messages":[{"role":"wizard","content":"x"}]}"#.to_vec(), "role"),
        ("POST", "/v1/chat/completions".into(), br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":0}"#.to_vec(), "max_tokens"),
        ("POST", "/v1/chat/completions".into(), br#"{"messages":[{"role":"user","content":"x"}],"n":3}"#.to_vec(), "n"),
        ("GET", "/v2/nothing".into(), Vec::new(), "no route"),
    ];
    let mut n = 0;
    while n < 200 {
        for (method, path, body, needle) in &cases {
            let b = (*method == "POST").then_some(("application/json", body.as_slice()));
            let (code, text) = call(method, &r.url(path), b);
            assert!((400..500).contains(&code), "{method} {path}: {code} {text}");
            let v: Value =
                serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text}"));
            let msg = v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
                + v["error"]["field"].as_str().unwrap_or_default();
            assert!(msg.contains(needle), "{path} ({needle}): {text}");
            n += 1;
        }
    }
    // a huge body is refused from its declared length, before it is read: send the headers
    // only and read the answer (a client still writing 2 MiB may see the connection close
    // before it reads the 413)
    for _ in 0..4 {
        let (code, text) = declared_only(&r, ev, big.len());
        assert_eq!(code, 413, "{text}");
        assert!(text.contains("too large"), "{text}");
    }
    assert_eq!(get(&r.url("/health")).1["status"], "ok");
    assert_eq!(ask(&r, "m", "still there?")["type"], "reply");
    r.stop();
}

/// POSTs headers declaring `len` body bytes, sends none, and reads the status and body.
fn declared_only(r: &Running, path: &str, len: usize) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(r.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, text)
}

#[test]
fn an_event_flood_gets_429s_with_bounded_queues_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.triage.capacity = 4;
    let r = start(cfg, Duration::from_millis(100));
    create(&r, "f");
    let (mut ok, mut limited) = (0, 0);
    for i in 0..200 {
        let (code, v) = json(
            "POST",
            &r.url("/v1/streams/f/events"),
            &json!({"type": "comment", "viewer": format!("v{i}"), "text": format!("so fun {i}")}),
        );
        match code {
            202 => ok += 1,
            429 => {
                limited += 1;
                assert_eq!(v["error"]["type"], "rate_limit_error");
            }
            c => panic!("{c}: {v}"),
        }
        let (_, s) = get(&r.url("/v1/streams/f"));
        let waiting: u64 = s["queue"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert!(waiting <= 4, "{s}");
    }
    assert!(limited > 100 && ok >= 4, "ok {ok}, 429 {limited}");
    let (_, m) = call("GET", &r.url("/metrics"), None);
    assert!(
        m.contains("hat_requests_rejected_total{reason=\"queue_full\"}"),
        "{m}"
    );
    assert!(m.contains("hat_shared_prefix_tokens_total"), "{m}");
    // once the flood stops, a question is answered
    assert_eq!(ask(&r, "f", "how much is link 2?")["type"], "reply");
    r.stop();
}

#[test]
fn a_default_stream_exists_from_the_start_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.default_stream = Some(("demo".into(), 1));
    let r = start(cfg.clone(), Duration::ZERO);
    assert_eq!(
        ask(&r, "demo", "hello, is the first one in stock?")["type"],
        "reply"
    );
    r.stop();
    // restarting keeps the stream (and its counters) instead of making a new one
    let r = start(cfg, Duration::ZERO);
    assert_eq!(get(&r.url("/v1/streams/demo")).1["counters"]["replied"], 1);
    r.stop();
}

/// The `at` of the first log entry of `kind` on a stream.
fn first_at(r: &Running, stream: &str, kind: &str) -> f64 {
    let (_, text) = sse_until(
        &r.url(&format!("/v1/streams/{stream}/events?after=0")),
        &format!("event: {kind}"),
    );
    let data = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data: "))
        .unwrap();
    let v: Value = serde_json::from_str(data).unwrap();
    v["at"].as_f64().unwrap()
}

/// On streams `a` and `b`: a comment on `a` that needs two model turns (a tool call, then
/// the reply), `after` later a question on `b`, then one more on `a`; both get replies.
fn b_asks_while_a_pins(r: &Running, after: Duration) {
    create(r, "a");
    create(r, "b");
    let (code, _) = json(
        "POST",
        &r.url("/v1/streams/a/events"),
        &json!({"type": "comment", "viewer": "x", "text": "please pin it"}),
    );
    assert_eq!(code, 202);
    std::thread::sleep(after);
    assert_eq!(ask(r, "b", "hello there")["type"], "reply");
    assert_eq!(ask(r, "a", "and the price?")["type"], "reply");
}

#[test]
fn a_stream_joins_the_running_batch_at_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    // a model turn takes 1 s, so b's post lands inside a's first turn with a wide margin
    let r = start(config(dir.path()), Duration::from_millis(1000));
    b_asks_while_a_pins(&r, Duration::from_millis(100));
    // b started while a's first reply was still being made, not after it
    assert!(first_at(&r, "b", "started") < first_at(&r, "a", "reply"));
    r.stop();
}

/// With continuous batching a new event's episode joins between two decode steps, in the
/// middle of another stream's turn, and a short reply leaves the batch before a long one.
#[test]
fn a_stream_joins_a_continuous_batch_between_decode_steps() {
    let dir = tempfile::tempdir().unwrap();
    // a's tool call takes 10 steps of 100 ms: b's post lands inside it with a wide margin
    let model = Stepwise::new(Duration::from_millis(100));
    let most = model.most.clone();
    let r = start_with(config(dir.path()), Box::new(model), &harness_dir());
    b_asks_while_a_pins(&r, Duration::from_millis(150));
    // b began inside a's first turn, and its short reply went out before a's first turn ended
    assert!(first_at(&r, "b", "started") < first_at(&r, "a", "turn"));
    assert!(first_at(&r, "b", "reply") < first_at(&r, "a", "turn"));
    assert!(most.load(std::sync::atomic::Ordering::SeqCst) >= 2);
    r.stop();
}

/// A model that streams its turns sends each turn's text as `delta` events, before the
/// turn's own event, to the clients connected at the time; a client that connects later
/// replays the log without them (the turn events hold the same text whole).
#[test]
fn decoded_text_goes_to_live_subscribers_before_its_turn_and_stays_out_of_the_log() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let model = Stepwise::new(Duration::from_millis(1));
    let r = start_with(config(dir.path()), Box::new(model), &harness_dir());
    create(&r, "d");
    // the call returns once the server has subscribed this client
    let resp = ureq::AgentBuilder::new()
        .timeout_read(Duration::from_secs(30))
        .build()
        .get(&r.url("/v1/streams/d/events"))
        .call()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut events: Vec<Value> = Vec::new();
        for line in std::io::BufReader::new(resp.into_reader()).lines() {
            let line = line.unwrap();
            if let Some(data) = line.strip_prefix("data: ") {
                let v: Value = serde_json::from_str(data).unwrap();
                let done = v["type"] == "reply";
                events.push(v);
                if done {
                    break;
                }
            }
        }
        events
    });
    let reply = ask(&r, "d", "please pin the first one");
    let id = reply["id"].as_u64().unwrap();
    let events = reader.join().unwrap();
    let of = |kind: &str| -> Vec<&Value> {
        events
            .iter()
            .filter(|e| e["type"] == kind && e["id"] == id)
            .collect()
    };
    let turns = of("turn");
    assert!(turns.len() >= 2, "a call and a reply: {events:?}");
    for t in &turns {
        let index = &t["index"];
        let deltas: Vec<&Value> = of("delta")
            .into_iter()
            .filter(|d| &d["index"] == index)
            .collect();
        assert!(deltas.len() > 1, "turn {index} came in pieces: {deltas:?}");
        let text: String = deltas.iter().map(|d| d["text"].as_str().unwrap()).collect();
        assert_eq!(text, t["text"].as_str().unwrap(), "turn {index}");
        let last = deltas
            .iter()
            .map(|d| d["seq"].as_u64().unwrap())
            .max()
            .unwrap();
        assert!(
            last < t["seq"].as_u64().unwrap(),
            "turn {index}: text after its turn"
        );
    }
    let (_, replayed) = sse_until(&r.url("/v1/streams/d/events?after=0"), "event: reply");
    assert!(replayed.contains("event: turn"), "{replayed}");
    assert!(!replayed.contains("event: delta"), "{replayed}");
    r.stop();
}

#[test]
fn openai_tool_calls_go_out_and_results_come_back_in_the_harness_syntax() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let tools = json!([{"type": "function", "function": {"name": "check_stock", "description": "units left",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}}]);
    let req = json!({"messages": [{"role": "user", "content": "stock please"}], "tools": tools});
    let (code, v) = json("POST", &r.url("/v1/chat/completions"), &req);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{v}");
    let tc = v["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(tc["function"]["name"], "check_stock");
    assert_eq!(
        serde_json::from_str::<Value>(tc["function"]["arguments"].as_str().unwrap()).unwrap(),
        json!({"id": "P1"})
    );
    // the client runs the tool and sends the result back by call id
    let req2 = json!({"messages": [
        {"role": "user", "content": "stock please"},
        {"role": "assistant", "content": null, "tool_calls": [tc]},
        {"role": "tool", "tool_call_id": tc["id"], "content": "5"}
    ], "tools": tools});
    let (code, v) = json("POST", &r.url("/v1/chat/completions"), &req2);
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["choices"][0]["message"]["content"], "There are 5 left.");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // streamed: the call arrives as one delta with its index
    let mut sreq = req.clone();
    sreq["stream"] = json!(true);
    let (code, text) = post_text(&r.url("/v1/chat/completions"), &sreq);
    assert_eq!(code, 200);
    assert!(
        text.contains("\"tool_calls\":[{") && text.contains("\"index\":0"),
        "{text}"
    );
    assert!(text.contains("\"finish_reason\":\"tool_calls\""), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    // tool_choice naming an unknown tool is a 400 naming the field
    let mut bad = req.clone();
    bad["tool_choice"] = json!({"type": "function", "function": {"name": "nope"}});
    let (code, v) = json("POST", &r.url("/v1/chat/completions"), &bad);
    assert_eq!(code, 400);
    assert_eq!(v["error"]["field"], "tool_choice.function.name");
    r.stop();
}

/// Red-team finding: two servers could share one data folder and overwrite each other's
/// streams; the second is refused while the first lives.
#[test]
fn a_second_server_on_the_same_data_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    let version = hat_serve::load_dir(&harness_dir(), "h".into()).unwrap();
    let second = hat_serve::app::Server::start(
        config(dir.path()),
        Box::new(Scripted {
            delay: Duration::ZERO,
        }),
        version,
    );
    let e = match second {
        Ok(_) => panic!("a second server started on the same data folder"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("in use by another hat serve"), "{e}");
    r.stop();
}

/// Stops the server on a thread of its own and fails with `what` if that takes longer than
/// `secs` (a shutdown that hangs fails the test instead of hanging it).
fn stops_within(r: Running, secs: u64, what: &str) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        r.stop();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(secs)).expect(what);
}

/// A client that keeps following a stream (the console does) must not hold a graceful
/// shutdown forever: the event streams end when shutdown starts.
#[test]
fn shutdown_ends_open_event_streams() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "demo");
    let addr = r.addr();
    let reader = std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /v1/streams/demo/events HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = Vec::new();
        // returns when the server closes the connection
        let _ = s.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).to_string()
    });
    std::thread::sleep(Duration::from_millis(200));
    stops_within(r, 30, "the server stopped with an event stream open");
    let text = reader.join().unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// Audit finding: a client that sends its body a byte at a time (or never finishes it) held a
/// graceful shutdown forever, so the worker never stopped and saved. After the grace the
/// server closes such connections and stops.
#[test]
fn shutdown_does_not_wait_forever_on_a_request_that_never_ends() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.shutdown_grace = Duration::from_millis(100);
    let r = start(cfg, Duration::ZERO);
    create(&r, "demo");
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(r.addr()).unwrap();
    s.write_all(
        b"POST /v1/streams/demo/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"ev",
    )
    .unwrap();
    // the request is being read when shutdown starts: wait until the server has it
    let (code, _) = get(&r.url("/v1/streams/demo"));
    assert_eq!(code, 200);
    stops_within(r, 60, "the server waited on a request that never ends");
    drop(s);
}

/// Reads from `s` until the server closes the connection (bounded: 30 s); what arrived.
fn read_until_closed(s: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => return String::from_utf8_lossy(&buf).to_string(),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return String::from_utf8_lossy(&buf).to_string()
            }
            Err(e) => panic!(
                "the server kept the connection open: {e} (read so far: {})",
                String::from_utf8_lossy(&buf)
            ),
        }
    }
}

/// Audit finding: a client that opened connections and sent its headers a byte at a time (or
/// nothing, "slowloris") held a task and a socket each for ever; a request's body likewise.
/// Headers and bodies now have deadlines (`header_timeout`, `body_timeout`: 408).
#[test]
fn slow_clients_are_cut_off_and_the_server_keeps_serving() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.connections.header_timeout = Duration::from_millis(300);
    cfg.connections.body_timeout = Duration::from_millis(300);
    let r = start(cfg, Duration::ZERO);
    create(&r, "demo");
    // nothing sent, and half a request line: both closed
    let mut idle = std::net::TcpStream::connect(r.addr()).unwrap();
    let mut half = std::net::TcpStream::connect(r.addr()).unwrap();
    half.write_all(b"GET /health HT").unwrap();
    assert_eq!(read_until_closed(&mut idle), "");
    let text = read_until_closed(&mut half);
    assert!(!text.contains("200 OK"), "{text}");
    // a body that stops part-way: 408 naming the deadline
    let mut slow = std::net::TcpStream::connect(r.addr()).unwrap();
    slow.write_all(
        b"POST /v1/streams/demo/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"ev",
    )
    .unwrap();
    let text = read_until_closed(&mut slow);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("did not arrive within"), "{text}");
    let (code, _) = get(&r.url("/v1/streams/demo"));
    assert_eq!(code, 200);
}

/// Past `max_connections` a new connection waits to be accepted until one closes.
#[test]
fn connections_past_the_cap_wait_for_one_to_close() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.connections.max_connections = 1;
    let r = start(cfg, Duration::ZERO);
    let holder = std::net::TcpStream::connect(r.addr()).unwrap();
    // the holder is accepted once the server answers a request on it
    let mut holder = holder;
    holder
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = holder.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let mut waiting = std::net::TcpStream::connect(r.addr()).unwrap();
    waiting
        .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    waiting
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let e = waiting.read(&mut buf).unwrap_err();
    assert!(
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{e}"
    );
    drop(holder);
    let text = read_until_closed(&mut waiting);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// A scripted model that records the openings it is asked to warm and the system prompts of
/// the turns it answers.
struct Recording {
    inner: Scripted,
    /// Each opening warmed, and each prompt asked: their messages' contents.
    warmed: std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>,
    asked: std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>,
}

fn contents(m: &[hat_harness::Message]) -> Vec<String> {
    m.iter().map(|x| x.content.clone()).collect()
}

impl hat_agent::episode::ChatModel for Recording {
    fn complete(&mut self, m: &[hat_harness::Message]) -> Result<String, hat_agent::AgentError> {
        self.asked.lock().unwrap().push(contents(m));
        self.inner.complete(m)
    }
    fn warm(&mut self, opening: &[hat_harness::Message]) -> Result<usize, hat_agent::AgentError> {
        assert_eq!(opening[0].role, hat_harness::Role::System);
        assert_eq!(
            opening.len() % 2,
            1,
            "an opening is a system prompt and whole turns"
        );
        self.warmed.lock().unwrap().push(contents(opening));
        Ok(1)
    }
}

/// Waits (bounded) until `f` holds; the worker warms while idle, so the test waits for the
/// state to arrive rather than for an amount of time.
fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{what} did not happen within 10 s");
}

#[test]
fn idle_time_warms_the_opening_the_next_event_opens_with() {
    let dir = tempfile::tempdir().unwrap();
    let warmed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let model = Recording {
        inner: Scripted {
            delay: Duration::ZERO,
        },
        warmed: warmed.clone(),
        asked: asked.clone(),
    };
    let r = start_with(config(dir.path()), Box::new(model), &harness_dir());
    let count = || warmed.lock().unwrap().len();
    let nth = |i: usize| warmed.lock().unwrap()[i].clone();
    // the prompt of the k-th model call opens with warmed opening `w`
    let opens_with = |k: usize, w: &[String]| {
        let a = asked.lock().unwrap()[k].clone();
        a.len() > w.len() && a[..w.len()] == *w
    };
    // a new stream: its opening (a system prompt, no turns yet) is computed before any event
    create(&r, "w");
    eventually("warming the new stream", || count() == 1);
    assert_eq!(nth(0).len(), 1);
    ask(&r, "w", "hi Mia, is the hoodie available in M?");
    assert!(opens_with(0, &nth(0)));
    // the reply is a history turn of the next event's prompt: the opening with it is warmed
    eventually("warming after the reply", || count() == 2);
    assert_eq!(nth(1).len(), 3);
    assert!(nth(1)[2].contains("Mia here"), "{:?}", nth(1));
    // a join puts a line in the stream's recent activity, which the system prompt shows (and
    // its greeting is one more turn): the changed opening is warmed, and the next event opens
    // with it
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams/w/events?wait=true"),
        &json!({"type": "viewer_join", "viewer": "amy"}),
    );
    assert_eq!(code, 200, "{v}");
    eventually("warming after the join", || count() == 3);
    assert!(nth(2)[0].contains("amy joined"));
    assert_eq!(nth(2).len(), 5);
    let k = asked.lock().unwrap().len();
    ask(&r, "w", "thanks!");
    assert!(opens_with(k, &nth(2)));
    // its reply changes w's turns again; a second stream (another catalog), then a harness
    // swap: both streams' openings under the new version are warmed before their next events
    eventually("warming after the third reply", || count() == 4);
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams"),
        &json!({"id": "x", "seed": 5}),
    );
    assert_eq!(code, 201, "{v}");
    eventually("warming the second stream", || count() == 5);
    let zoe = renamed_harness(dir.path(), "Zoe");
    let (code, v) = json("POST", &r.url("/v1/harness"), &json!({"path": zoe}));
    assert_eq!(code, 200, "{v}");
    eventually("warming the swapped-in version", || count() == 7);
    assert!((5..7).all(|i| nth(i)[0].contains("Zoe")));
    let k = asked.lock().unwrap().len();
    ask(&r, "x", "is it in L?");
    assert!(
        (5..7).any(|i| opens_with(k, &nth(i))),
        "the event on x did not open with a warmed opening"
    );
    // a reply on one stream does not warm the other again: its opening did not change
    let all = warmed.lock().unwrap().clone();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), all.len(), "an opening was warmed twice");
    let (_, metrics) = call("GET", &r.url("/metrics"), None);
    assert!(
        metrics.contains("hat_warmed_prompt_tokens_total"),
        "{metrics}"
    );
    r.stop();
}

#[test]
fn a_reply_that_runs_out_of_turns_still_answers_the_viewer() {
    for (final_reply, continuous) in [(true, false), (false, false), (true, true), (false, true)] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = hat_serve::ServeConfig {
            max_turns: 3,
            final_reply,
            ..config(dir.path())
        };
        let model: Box<dyn hat_agent::episode::ChatModel + Send> = if continuous {
            Box::new(Stepwise::new(Duration::ZERO))
        } else {
            Box::new(Scripted {
                delay: Duration::ZERO,
            })
        };
        let r = start_with(cfg, model, &harness_dir());
        create(&r, "demo");
        let reply = ask(&r, "demo", "keep looking for socks please");
        assert_eq!(reply["type"], "reply", "{reply}");
        let calls = reply["tool_calls"].as_array().unwrap().len();
        if final_reply {
            // two searches, then the last turn answers
            assert_eq!(reply["text"], "No socks today, sorry!", "{reply}");
            assert_eq!(calls, 2, "{reply}");
        } else {
            assert_eq!(reply["text"], "", "{reply}");
            assert_eq!(calls, 3, "{reply}");
            assert!(reply["errors"].to_string().contains("no reply"), "{reply}");
        }
        r.stop();
    }
}

/// Review finding: an event a stream-event hook blocked was reported as an error ("the
/// episode has no prompt to continue") and counted in `errors`; it is the harness's
/// decision: its hook event and a reply that says it was blocked.
#[test]
fn an_event_a_hook_blocks_is_answered_by_the_hook_not_reported_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h-blocking");
    copy_dir(&harness_dir(), &h);
    let script = h.join("hooks/block-spam.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\nif grep -q 'my spam'; then echo 'no spam here' >&2; exit 2; fi\nexit 0\n",
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut hooks = std::fs::read_to_string(h.join("hooks.toml")).unwrap();
    hooks.push_str(
        "\n[[hooks]]\nid = \"block-spam\"\nevent = \"comment\"\naction = \"command\"\ncommand = [\"./hooks/block-spam.sh\"]\n",
    );
    std::fs::write(h.join("hooks.toml"), hooks).unwrap();
    for continuous in [false, true] {
        let data = dir.path().join(format!("data-{continuous}"));
        let model: Box<dyn hat_agent::episode::ChatModel + Send> = if continuous {
            Box::new(Stepwise::new(Duration::ZERO))
        } else {
            Box::new(Scripted {
                delay: Duration::ZERO,
            })
        };
        let r = start_with(config(&data), model, &h);
        create(&r, "demo");
        let blocked = ask(&r, "demo", "buy my spam now");
        assert_eq!(blocked["type"], "reply", "{blocked}");
        assert_eq!(blocked["text"], "", "{blocked}");
        assert!(
            blocked["errors"].to_string().contains("no spam here"),
            "{blocked}"
        );
        // other comments pass the hook and are answered as before
        let fine = ask(&r, "demo", "hello");
        assert_eq!(fine["type"], "reply", "{fine}");
        assert!(fine["text"].as_str().unwrap().contains("Mia"), "{fine}");
        let (_, s) = get(&r.url("/v1/streams/demo"));
        assert_eq!(s["counters"]["errors"], 0, "{s}");
        assert_eq!(s["counters"]["replied"], 2, "{s}");
        let (_, log) = sse_until(&r.url("/v1/streams/demo/events?after=0"), "event: reply");
        assert!(
            log.contains("\"hook\":\"block-spam\"") && log.contains("blocked: no spam here"),
            "{log}"
        );
        assert!(!log.contains("event: error"), "{log}");
        r.stop();
    }
}

/// A model that always fails.
struct Failing;
impl hat_agent::episode::ChatModel for Failing {
    fn complete(&mut self, _m: &[hat_harness::Message]) -> Result<String, hat_agent::AgentError> {
        Err(hat_agent::AgentError::Model("the model is down".into()))
    }
}

/// Review finding: a failed reply named only its own event, so a `?wait=true` request whose
/// comment had merged into it waited out the whole request timeout for an answer that was
/// never coming.
#[test]
fn a_failed_reply_fails_the_comments_merged_into_it_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = hat_serve::ServeConfig {
        // long enough to tell "answered at once" from "waited it out"
        request_timeout: Duration::from_secs(20),
        ..config(dir.path())
    };
    let r = start_with(cfg, Box::new(Failing), &harness_dir());
    create(&r, "demo");
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams/demo/events?wait=true"),
        &json!({"events": [
            {"type": "comment", "viewer": "a", "text": "is the hoodie in stock?"},
            {"type": "comment", "viewer": "b", "text": "Is the hoodie in stock"},
        ]}),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["accepted"][1]["admission"]["status"], "merged", "{v}");
    for k in 0..2 {
        assert_eq!(v["results"][k]["type"], "error", "result {k}: {v}");
        assert!(
            v["results"][k]["message"]
                .as_str()
                .unwrap()
                .contains("the model is down"),
            "{v}"
        );
    }
    assert_eq!(v["results"][0]["answers"][1], v["accepted"][1]["id"], "{v}");
    r.stop();
}

/// Answers once the test lets it (every answer after the sender is dropped comes at once).
struct Held(std::sync::Mutex<std::sync::mpsc::Receiver<()>>);
impl hat_agent::episode::ChatModel for Held {
    fn complete(&mut self, _m: &[hat_harness::Message]) -> Result<String, hat_agent::AgentError> {
        let _ = self.0.lock().unwrap().recv();
        Ok("Thanks for watching!".into())
    }
}

/// Polls (bounded, generously) for something another thread does.
fn within_30s(what: &str, f: impl Fn() -> bool) {
    for _ in 0..3000 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("not within 30 s: {what}");
}

/// Audit finding: a streamed chat request's deadline started only once generation had
/// finished, so one queued behind a busy model waited with no limit. It ends with a timeout
/// event after the request timeout, whatever the model is doing.
#[test]
fn a_streamed_chat_request_ends_at_its_deadline_while_the_model_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = hat_serve::ServeConfig {
        request_timeout: Duration::from_secs(1),
        ..config(dir.path())
    };
    let (release, held) = std::sync::mpsc::channel();
    let r = start_with(
        cfg,
        Box::new(Held(std::sync::Mutex::new(held))),
        &harness_dir(),
    );
    // declared after the server, so a failing assertion releases the model before the
    // server's drop waits for it
    let release = release;
    create(&r, "q");
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams/q/events"),
        &json!({"type": "comment", "viewer": "a", "text": "hello"}),
    );
    assert_eq!(code, 202, "{v}");
    within_30s("the comment is in flight", || {
        !get(&r.url("/v1/streams/q")).1["in_flight"].is_null()
    });
    let url = r.url("/v1/chat/completions");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let req = json!({"model": "hat", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
        let _ = tx.send(post_text(&url, &req));
    });
    let (code, text) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the streamed request waited on the busy model past its deadline");
    assert_eq!(code, 200, "{text}");
    assert!(text.contains("timed out after 1 s"), "{text}");
    drop(release);
    r.stop();
}

/// Audit finding: a round of stream replies yielded only to chat requests that arrived during
/// it, so requests already queued waited until every stream's queue ran dry: under a steady
/// flood of comments, never (they timed out). Now a round yields to them after `MAX_ROUND`.
#[test]
fn queued_chat_requests_are_served_while_streams_stay_busy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = hat_serve::ServeConfig {
        request_timeout: Duration::from_secs(20),
        ..config(dir.path())
    };
    let r = start(cfg, Duration::from_millis(20));
    for s in ["a", "b"] {
        create(&r, s);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let (base, stop) = (r.url(""), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for s in ["a", "b"] {
                    n += 1;
                    let text = format!("question {n} about item {}", n * 7919 % 1000);
                    let _ = json(
                        "POST",
                        &format!("{base}/v1/streams/{s}/events"),
                        &json!({"type": "comment", "viewer": format!("v{n}"), "text": text}),
                    );
                }
            }
        })
    };
    within_30s("the streams are busy", || {
        !get(&r.url("/v1/streams/a")).1["in_flight"].is_null()
    });
    let chats: Vec<_> = (0..2)
        .map(|i| {
            let url = r.url("/v1/chat/completions");
            std::thread::spawn(move || {
                let req = json!({"model": "hat", "messages": [{"role": "user", "content": format!("hello {i}")}]});
                json("POST", &url, &req)
            })
        })
        .collect();
    let answers: Vec<(u16, Value)> = chats.into_iter().map(|c| c.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    flood.join().unwrap();
    for (code, v) in answers {
        assert_eq!(code, 200, "{v}");
    }
    r.stop();
}

/// Review finding: in `[like, comment]` sent to a full queue the likes were counted before
/// the comment was refused with 429, so the client's retry counted them twice.
#[test]
fn a_request_refused_with_429_counts_none_of_its_likes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.triage.capacity = 1;
    let (release, held) = std::sync::mpsc::channel();
    let r = start_with(
        cfg,
        Box::new(Held(std::sync::Mutex::new(held))),
        &harness_dir(),
    );
    create(&r, "q");
    let post = |body: Value| json("POST", &r.url("/v1/streams/q/events"), &body);
    let (code, v) = post(json!({"type": "comment", "viewer": "a", "text": "lol one"}));
    assert_eq!(code, 202, "{v}");
    // the host is busy with it, so the next one fills the queue of one
    within_30s("the first comment is in flight", || {
        !get(&r.url("/v1/streams/q")).1["in_flight"].is_null()
    });
    let (code, v) = post(json!({"type": "comment", "viewer": "b", "text": "lol two"}));
    assert_eq!(code, 202, "{v}");
    let (code, v) = post(json!({"events": [
        {"type": "like", "viewer": "c", "count": 5},
        {"type": "comment", "viewer": "c", "text": "lol three"},
    ]}));
    assert_eq!(code, 429, "{v}");
    let (_, s) = get(&r.url("/v1/streams/q"));
    assert_eq!(s["counters"]["likes"], 0, "{s}");
    // likes alone are counted (they never wait in the queue)
    let (code, v) = post(json!({"type": "like", "viewer": "c", "count": 5}));
    assert_eq!(code, 202, "{v}");
    assert_eq!(v["accepted"][0]["likes"], 5, "{v}");
    drop(release);
    r.stop();
}

/// Review finding: a bad query parameter or path id got axum's plain-text 400; every 4xx
/// is the server's JSON error, naming the field.
#[test]
fn bad_query_parameters_and_path_ids_get_json_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let r = start(config(dir.path()), Duration::ZERO);
    create(&r, "demo");
    let event = br#"{"type": "comment", "viewer": "v", "text": "hi"}"#;
    for (method, path, field) in [
        ("POST", "/v1/streams/demo/events?wait=yes", "wait"),
        ("GET", "/v1/streams/demo/events?after=x", "after"),
        ("GET", "/v1/streams/demo/events?after=-1", "after"),
        ("GET", "/v1/streams/%FF", "id"),
        ("GET", "/v1/streams/%FF/events", "id"),
        ("POST", "/v1/streams/%FF/events", "id"),
        ("POST", "/v1/experiments/%FF/stop", "name"),
    ] {
        let body = (method == "POST").then_some(("application/json", event.as_slice()));
        let (code, text) = call(method, &r.url(path), body);
        assert_eq!(code, 400, "{method} {path}: {text}");
        let v: Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text}"));
        assert_eq!(v["error"]["field"], field, "{method} {path}: {v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    }
    // good parameters still work
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams/demo/events?wait=true"),
        &json!({"type": "comment", "viewer": "v", "text": "hi"}),
    );
    assert_eq!(code, 200, "{v}");
    r.stop();
}

/// Review finding: event ids and log sequence numbers were saved only after a reply, so a
/// server killed after handing some out (in 202 answers, SSE ids) handed them out again after
/// its restart, and a client resuming with `Last-Event-ID` missed the new events. A copy of
/// the data folder taken while the server runs is what a SIGKILL leaves on disk.
#[test]
fn ids_handed_out_before_a_crash_are_never_handed_out_again() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let (release, held) = std::sync::mpsc::channel();
    let r = start_with(
        config(&live),
        Box::new(Held(std::sync::Mutex::new(held))),
        &harness_dir(),
    );
    create(&r, "s");
    let mut last_id = 0;
    for i in 0..3 {
        let (code, v) = json(
            "POST",
            &r.url("/v1/streams/s/events"),
            &json!({"type": "comment", "viewer": "v", "text": format!("question {i}?")}),
        );
        assert_eq!(code, 202, "{v}");
        last_id = v["accepted"][0]["id"].as_u64().unwrap();
    }
    let last_seq = get(&r.url("/v1/streams/s")).1["last_seq"].as_u64().unwrap();
    assert!(last_seq >= 3);
    // no reply has been saved: the host is still on the first comment
    let crashed = dir.path().join("crashed");
    copy_dir(&live, &crashed);
    drop(release);
    r.stop();

    let r = start(config(&crashed), Duration::ZERO);
    let (code, v) = json(
        "POST",
        &r.url("/v1/streams/s/events"),
        &json!({"type": "comment", "viewer": "v", "text": "after the restart?"}),
    );
    assert_eq!(code, 202, "{v}");
    let id = v["accepted"][0]["id"].as_u64().unwrap();
    assert!(
        id > last_id,
        "event id {id} was handed out before the crash (up to {last_id})"
    );
    let seq = get(&r.url("/v1/streams/s")).1["last_seq"].as_u64().unwrap();
    assert!(seq > last_seq, "log sequence {seq} is not past {last_seq}");
    r.stop();
}
