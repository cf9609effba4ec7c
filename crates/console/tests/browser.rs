//! The console in a real browser: headless Chromium (Debian's `chromium`, driven through
//! its `chromedriver`) against a running server with a scripted model. It posts a comment
//! and sees the reply, edits a harness file into an invalid state and sees the problem with
//! its file and line, fixes it, activates it and sees new replies carry the new hash, rolls
//! back, and reads the metrics. Screenshots go to `target/tmp/console-screenshots/`.
//!
//! Needs `chromium` and `chromium-driver` (`.ci/run` installs them). Set
//! `HAT_SKIP_BROWSER_TESTS=1` to skip on a machine without them.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hat_agent::episode::ChatModel;
use hat_agent::AgentError;
use hat_harness::{Message, Role};
use hat_serve::{ServeConfig, Server};

/// Greets by the persona its system prompt names, so a reply shows its harness version.
struct Scripted;

impl ChatModel for Scripted {
    fn complete(&mut self, messages: &[Message]) -> Result<String, AgentError> {
        let system = messages.first().map(|m| m.content.as_str()).unwrap_or("");
        let persona = ["Mia", "Zoe"]
            .into_iter()
            .find(|p| system.contains(&format!("You are {p}")))
            .unwrap_or("nobody");
        let last = messages.last().expect("a prompt");
        if last.role == Role::User && last.content.starts_with("[runtime]") {
            return Ok(format!("Sorry! {persona} here, let me fix that."));
        }
        Ok(format!("Hi, {persona} here! Thanks for stopping by."))
    }
}

fn harness_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../harnesses/livestream")
}

/// Kills the driver and the browser it started when the test ends, pass or fail: a browser
/// left behind would keep its connections to the server open. (Only the driver's own
/// children: killing a process group could reach the test runner's.)
struct Driver(Child);

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-9", "-P", &self.0.id().to_string()])
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tool(env: &str, candidates: &[&str]) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        return Some(PathBuf::from(p));
    }
    candidates.iter().map(PathBuf::from).find(|p| p.exists())
}

fn shots() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(shots().join(name), png).unwrap();
}

/// Waits (at most 30 s) until some element matching `css` has text containing `needle`;
/// returns that element's text.
async fn wait_text(c: &Client, css: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(els) = c.find_all(Locator::Css(css)).await {
            for e in els {
                if let Ok(t) = e.text().await {
                    if t.contains(needle) {
                        return t;
                    }
                }
            }
        }
        if Instant::now() > deadline {
            let body = c
                .find(Locator::Css("body"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap_or_default();
            shot(
                c,
                &format!(
                    "timeout-{}.png",
                    needle.replace(|ch: char| !ch.is_alphanumeric(), "_")
                ),
            )
            .await;
            panic!("no `{css}` with text `{needle}` after 30 s; the page shows:\n{body}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clicks the element `css` selects once it exists, retrying while the page re-renders it
/// (a list redrawn after a fetch makes a found element stale); at most 30 s.
async fn click(c: &Client, css: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let clicked = match c.find(Locator::Css(css)).await {
            Ok(e) => e.click().await.is_ok(),
            Err(_) => false,
        };
        if clicked {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "could not click `{css}` for 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sets the editor's text as a user's typing would (an `input` event).
async fn edit(c: &Client, text: &str) {
    c.execute(
        "const ed = document.getElementById('editor'); ed.value = arguments[0]; \
         ed.dispatchEvent(new Event('input'));",
        vec![serde_json::json!(text)],
    )
    .await
    .unwrap();
}

async fn comment(c: &Client, text: &str) {
    let box_ = c.find(Locator::Id("comment-text")).await.unwrap();
    box_.clear().await.unwrap();
    box_.send_keys(text).await.unwrap();
    click(c, "#comment-form button[type=submit]").await;
}

/// Waits until the newest reply (the list's first item) contains `needle`; its harness hash.
async fn reply_harness(c: &Client, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(first) = c.find(Locator::Css("#replies li")).await {
            if first.text().await.is_ok_and(|t| t.contains(needle)) {
                return first.attr("data-harness").await.unwrap().unwrap();
            }
        }
        assert!(
            Instant::now() < deadline,
            "no newest reply with `{needle}` after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn the_console_drives_a_live_stream_and_the_harness_in_a_browser() {
    if std::env::var("HAT_SKIP_BROWSER_TESTS").is_ok_and(|v| v == "1") {
        eprintln!("HAT_SKIP_BROWSER_TESTS=1: the browser test is skipped");
        return;
    }
    let chromium = tool("HAT_CHROMIUM", &["/usr/bin/chromium", "/usr/bin/chromium-browser"])
        .expect("no chromium: install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver), set HAT_CHROMIUM, or HAT_SKIP_BROWSER_TESTS=1");
    let chromedriver = tool("HAT_CHROMEDRIVER", &["/usr/bin/chromedriver"])
        .expect("no chromedriver: apt-get install chromium-driver, set HAT_CHROMEDRIVER, or HAT_SKIP_BROWSER_TESTS=1");

    let data = tempfile::tempdir().unwrap();
    // one evaluation run and one training run for the Runs view
    let runs = data.path().join("runs");
    std::fs::create_dir_all(runs.join("eval-demo/lsqa")).unwrap();
    std::fs::write(
        runs.join("eval-demo/lsqa/results.json"),
        r#"{"suite":"lsqa","score":42.5,"model":{"name":"demo-model"}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(runs.join("sft-demo")).unwrap();
    std::fs::write(
        runs.join("sft-demo/metrics.jsonl"),
        "{\"step\":1,\"loss\":2.0}\n{\"step\":2,\"loss\":1.0,\"val_loss\":1.2}\n",
    )
    .unwrap();
    // and a `hat ab run` result for the A/B view
    std::fs::create_dir_all(runs.join("ab-demo")).unwrap();
    std::fs::write(
        runs.join("ab-demo/report.json"),
        r#"{"experiment":"sim-demo","unit":"viewer","alpha":0.05,"control":"base",
            "arms":[{"name":"base","model":"default","harness":"harnesses/livestream","viewers":10},
                    {"name":"hsa","model":"hsa.gguf","harness":"harnesses/livestream","viewers":12}],
            "metrics":[{"metric":"correct_replies","comparisons":[["hsa",{"n_a":10,"n_b":12,
              "mean_a":0.1,"mean_b":0.5,"diff":0.4,"welch":{"lo":0.1,"hi":0.7},
              "always_valid":{"lo":0.05,"hi":0.75},"significant":true}]]}]}"#,
    )
    .unwrap();
    let cfg = ServeConfig {
        runs_dir: Some(runs),
        data_dir: data.path().to_path_buf(),
        request_timeout: Duration::from_secs(60),
        default_stream: Some(("demo".into(), 1)),
        harness_roots: vec![harness_dir().parent().unwrap().to_path_buf()],
        ..ServeConfig::default()
    };
    let version = hat_serve::load_dir(&harness_dir(), "test".into()).unwrap();
    let server = Server::start(cfg, Box::new(Scripted), version)
        .unwrap()
        .with_routes(hat_console::router())
        .spawn("127.0.0.1:0".parse().unwrap())
        .unwrap();
    let url = server.url();

    let port = free_port();
    let _driver = Driver(
        Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting chromedriver"),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            }),
        );
        // the driver takes a moment to listen
        let deadline = Instant::now() + Duration::from_secs(20);
        let c = loop {
            // plain HTTP to the local driver: no TLS stack needed
            let http = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(http)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("chromedriver on port {port}: {e}"),
            }
        };

        // Live: the default stream is there; a comment gets its reply
        c.goto(&format!("{url}/console")).await.unwrap();
        wait_text(&c, "#stream-select option", "demo").await;
        comment(&c, "hello there").await;
        let first = reply_harness(&c, "Mia here").await;
        assert!(first.starts_with("sha256:"), "{first}");
        wait_text(&c, "#log li", "reply").await;
        // triage is shown: the comment was queued in its class
        wait_text(&c, "#log li", "queued (").await;
        shot(&c, "1-live.png").await;

        // Harness: an invalid edit shows its problem with file and line, and changes nothing
        click(&c, "#tab-harness").await;
        wait_text(&c, "#file-list button", "harness.toml").await;
        click(&c, "button[data-file='harness.toml']").await;
        let original: String = c
            .execute("return document.getElementById('editor').value;", vec![])
            .await
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        assert!(original.contains("name = \"Mia\""), "{original}");
        edit(&c, &original.replacen("[persona]", "[persona\n", 1)).await;
        let problem = wait_text(&c, "#problems li", "harness.toml:").await;
        assert!(
            problem.chars().any(|ch| ch.is_ascii_digit()),
            "a line number: {problem}"
        );
        wait_text(&c, "#diff span", "[persona").await;
        shot(&c, "2-invalid.png").await;
        click(&c, "#harness-activate").await;
        wait_text(&c, "#status", "not activated").await;

        // fixed (the persona renamed), checked, activated: new replies carry the new hash
        edit(&c, &original.replace("name = \"Mia\"", "name = \"Zoe\"")).await;
        wait_text(&c, "#problems li", "No problems").await;
        click(&c, "#harness-activate").await;
        wait_text(&c, "#status", "is active").await;
        shot(&c, "3-activated.png").await;
        click(&c, "#tab-live").await;
        comment(&c, "who is hosting?").await;
        let second = reply_harness(&c, "Zoe here").await;
        assert_ne!(second, first);

        // roll back to the first version
        click(&c, "#tab-harness").await;
        let back = format!("button.rollback[data-hash='{first}']");
        wait_text(&c, "#versions li", "Roll back").await;
        click(&c, &back).await;
        wait_text(&c, "#status", "rolled back").await;
        click(&c, "#tab-live").await;
        comment(&c, "and now?").await;
        let third = reply_harness(&c, "Mia here").await;
        assert_eq!(third, first);

        // Metrics: the three replies are counted
        click(&c, "#tab-metrics").await;
        wait_text(&c, "#m-replies", "3").await;
        shot(&c, "4-metrics.png").await;

        // Runs: evaluations and training curves from the --runs folder
        click(&c, "#tab-runs").await;
        wait_text(&c, "#eval-table td", "42.5").await;
        wait_text(&c, "#train-list li", "sft-demo").await;
        let curves = c
            .find_all(Locator::Css("#chart-train polyline"))
            .await
            .unwrap()
            .len();
        assert_eq!(curves, 1);
        shot(&c, "5-runs.png").await;

        // A/B: start an experiment between the two versions, see its report, stop it
        click(&c, "#tab-ab").await;
        wait_text(&c, "#ab-control option", "(active)").await;
        click(&c, "#ab-form button[type=submit]").await;
        wait_text(&c, "#ab-list h2", "exp-1 (running)").await;
        wait_text(&c, "#ab-list td", "gmv").await;
        wait_text(
            &c,
            "#ab-sim h2",
            "sim-demo (simulated audience, runs/ab-demo)",
        )
        .await;
        wait_text(&c, "#ab-sim td", "correct_replies").await;
        shot(&c, "6-ab.png").await;
        click(&c, "#ab-list button.stop").await;
        wait_text(&c, "#ab-list h2", "exp-1 (stopped)").await;
        c.close().await.unwrap();
    });
    server.stop().unwrap();
}
