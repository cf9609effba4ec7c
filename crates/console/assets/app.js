// The HAT console: plain JavaScript over the server's HTTP API (no framework, no CDN).
'use strict';

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};
const short = (h) => (h || '').replace(/^sha256:/, '').slice(0, 12);
const secs = (x) => (typeof x === 'number' ? x.toFixed(2) + ' s' : '-');

const state = {
  token: sessionStorage.getItem('hat-token') || '',
  stream: null,
  follow: null,
  files: {},
  edited: {},
  executable: [],
  active: '',
  current: 'harness.toml',
  checkTimer: null,
  simTimer: null,
  series: [],
};

function status(text, bad) {
  const s = $('status');
  s.textContent = text;
  s.className = bad ? 'bad' : '';
}

// ---------------------------------------------------------------- the API

async function api(method, path, body) {
  const headers = {};
  if (state.token) headers.Authorization = 'Bearer ' + state.token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (r.status === 401) {
    $('login').hidden = false;
    throw new Error('this server needs its API token');
  }
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* plain text, e.g. /metrics */ }
  return { status: r.status, json, text };
}

function errorText(res) {
  const e = res.json && res.json.error;
  return e ? e.message : res.text.slice(0, 300);
}

// ---------------------------------------------------------------- tabs

function show(view) {
  for (const b of document.querySelectorAll('[role=tab]')) {
    b.setAttribute('aria-selected', String(b.dataset.view === view));
  }
  for (const s of document.querySelectorAll('.view')) s.hidden = s.id !== 'view-' + view;
  if (view === 'harness') loadHarness();
  if (view === 'metrics') pollMetrics();
  if (view === 'runs') loadRuns();
  if (view === 'ab') loadExperiments();
}

// ---------------------------------------------------------------- live

function describeEvent(e) {
  if (!e) return '';
  if (e.text !== undefined) return (e.viewer ? e.viewer + ': ' : '') + e.text;
  if (e.viewer) return e.type + ' ' + e.viewer + (e.gift ? ' (' + e.gift + ')' : '');
  return e.type || JSON.stringify(e);
}

function logLine(ev) {
  // decoded text as it comes; the whole turn follows as a 'turn' event
  if (ev.type === 'delta') return;
  const li = el('li', 'ev ev-' + ev.type);
  const head = el('span', 'kind', ev.type);
  li.append(head, ' ');
  let text = '';
  switch (ev.type) {
    case 'accepted': {
      // triage: queued by class, merged into a waiting duplicate, folded into a waiting join,
      // or queued by evicting a less important event
      const how = {
        queued: 'queued (' + ev.class + ')',
        merged: 'merged into #' + ev.into,
        folded: 'folded into #' + ev.into,
        queued_evicting: 'queued (' + ev.class + '), evicting #' + ev.evicted,
      }[ev.status] || ev.status;
      if (ev.status !== 'queued') li.classList.add('triaged');
      text = '#' + ev.id + ' ' + how + ': ' + describeEvent(ev.event);
      break;
    }
    case 'started':
      text = '#' + ev.id + ' (' + ev.class + ', harness ' + short(ev.harness) + ') ' + describeEvent(ev.event);
      break;
    case 'turn':
      text = '#' + ev.id + ' turn ' + ev.index + ': ' + ev.text + '  [' + ev.prompt_tokens + ' prompt, ' +
        ev.cached_tokens + ' cached, ' + ev.generated_tokens + ' generated, ' + secs(ev.seconds) + ']';
      break;
    case 'tool_result':
      text = '#' + ev.id + ' ' + ev.name + ' -> ' + ev.result.slice(0, 400);
      break;
    case 'hook':
      text = '#' + ev.id + ' ' + ev.hook + ': ' + ev.outcome;
      break;
    case 'reply': {
      const l = ev.latency || {};
      text = '#' + ev.id + ' ' + ev.text + '  [harness ' + short(ev.harness) + '; total ' + secs(l.total) +
        ', queue ' + secs(l.queue) + (ev.tool_calls.length ? '; calls ' + ev.tool_calls.join(', ') : '') +
        (ev.errors.length ? '; errors ' + ev.errors.join('; ') : '') + ']';
      addReply(ev);
      break;
    }
    case 'dropped':
      text = '#' + ev.id + (ev.merged.length ? ' (and #' + ev.merged.join(', #') + ')' : '') + ' not answered: ' +
        ev.reason + ' after ' + secs(ev.waited_s) + ' waiting (' + ev.class + ')';
      break;
    case 'error':
      text = (ev.id ? '#' + ev.id + ' ' : '') + ev.message;
      break;
    default:
      text = JSON.stringify(ev);
  }
  li.append(text);
  const log = $('log');
  log.append(li);
  while (log.children.length > 500) log.firstChild.remove();
  li.scrollIntoView({ block: 'nearest' });
}

function addReply(ev) {
  const li = el('li', 'reply');
  li.dataset.harness = ev.harness;
  const l = ev.latency || {};
  li.append(el('span', 'text', ev.text), el('span', 'meta mono', short(ev.harness) + ' · ' + secs(l.total)));
  const list = $('replies');
  list.prepend(li);
  while (list.children.length > 50) list.lastChild.remove();
}

// Follows a stream's server-sent events with fetch (EventSource cannot send a token).
async function follow(id) {
  if (state.follow) state.follow.abort();
  const ctl = new AbortController();
  state.follow = ctl;
  $('log').replaceChildren();
  $('replies').replaceChildren();
  const headers = state.token ? { Authorization: 'Bearer ' + state.token } : {};
  let after = 0;
  while (!ctl.signal.aborted) {
    try {
      const r = await fetch('/v1/streams/' + encodeURIComponent(id) + '/events?after=' + after, { headers, signal: ctl.signal });
      if (r.status === 401) { $('login').hidden = false; return; }
      if (!r.ok) { status('stream ' + id + ': ' + r.status, true); return; }
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let data = '', seq = null;
          for (const line of frame.split('\n')) {
            if (line.startsWith('data:')) data += line.slice(5).trim();
            if (line.startsWith('id:')) seq = Number(line.slice(3).trim());
          }
          if (seq !== null && !Number.isNaN(seq)) after = seq;
          if (data) {
            try { logLine(JSON.parse(data)); } catch (_) { /* keep-alive or partial */ }
          }
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
      status('event stream lost; reconnecting', true);
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

async function loadStreams(select) {
  const r = await api('GET', '/v1/streams');
  const ids = (r.json && r.json.streams || []).map((s) => (typeof s === 'string' ? s : s.id));
  const sel = $('stream-select');
  sel.replaceChildren(...ids.map((id) => { const o = el('option', '', id); o.value = id; return o; }));
  const pick = select || state.stream || ids[0];
  if (pick) {
    sel.value = pick;
    if (pick !== state.stream) { state.stream = pick; follow(pick); }
  }
  const h = await api('GET', '/v1/harness');
  if (h.json) $('active-harness').textContent = 'harness ' + short(h.json.active);
}

async function newStream() {
  const r = await api('POST', '/v1/streams', {});
  if (r.status !== 201) { status('new stream: ' + errorText(r), true); return; }
  await loadStreams(r.json.id);
  status('stream ' + r.json.id + ' created');
}

async function postComment(viewer, text) {
  if (!state.stream) { status('create a stream first', true); return; }
  const r = await api('POST', '/v1/streams/' + encodeURIComponent(state.stream) + '/events', {
    type: 'comment', viewer, text,
  });
  if (r.status >= 300) status('comment: ' + errorText(r), true);
}

// A small simulated audience: viewers asking what live-shopping viewers ask.
const SIM_VIEWERS = ['mei', 'jonas', 'ana', 'leo', 'xiaoyu', 'sam', 'priya', 'tomo'];
const SIM_COMMENTS = [
  'how much is the one on stage?', 'is it in stock in M?', 'does it ship to Shanghai? how long?',
  'any coupon today?', 'what is it made of?', 'compare link 1 and link 2 please',
  'anything under 100?', 'can I return it if it does not fit?', 'are you a real person?',
  '这个多少钱？', '有没有优惠券？', 'what is the final price for 2?',
];

function simulate(on) {
  clearInterval(state.simTimer);
  state.simTimer = null;
  if (!on) return;
  const tick = () => {
    const v = SIM_VIEWERS[Math.floor(Math.random() * SIM_VIEWERS.length)];
    const c = SIM_COMMENTS[Math.floor(Math.random() * SIM_COMMENTS.length)];
    postComment(v, c);
  };
  tick();
  state.simTimer = setInterval(tick, 5000);
}

// ---------------------------------------------------------------- harness

async function loadHarness() {
  const [v, f] = await Promise.all([api('GET', '/v1/harness'), api('GET', '/v1/harness/files')]);
  if (!v.json) { status('harness: ' + errorText(v), true); return; }
  state.active = v.json.active;
  $('harness-active').textContent = short(v.json.active);
  renderVersions(v.json.versions || [], v.json.last_rejected);
  if (f.status === 200) {
    state.files = f.json.files;
    state.executable = f.json.executable || [];
    state.edited = Object.assign({}, f.json.files);
    if (!(state.current in state.edited)) state.current = 'harness.toml';
    renderFiles();
    openFile(state.current);
    showProblems([]);
  } else {
    status('files: ' + errorText(f), true);
  }
}

function renderVersions(versions, rejected) {
  const ol = $('versions');
  ol.replaceChildren();
  for (const v of versions.slice().reverse()) {
    const li = el('li', v.active ? 'version active' : 'version');
    li.append(el('span', 'mono', short(v.hash)), ' ', el('span', 'src', v.source), ' ',
      el('span', 'when', new Date(v.loaded_at * 1000).toLocaleTimeString()));
    if (v.active) {
      li.append(' ', el('strong', '', 'active'));
    } else {
      const b = el('button', 'rollback', 'Roll back');
      b.type = 'button';
      b.dataset.hash = v.hash;
      b.addEventListener('click', () => rollback(v.hash));
      li.append(' ', b);
    }
    ol.append(li);
  }
  if (rejected) {
    const li = el('li', 'rejected', 'last rejected: ' + rejected.source + ': ' + rejected.problems.join('; '));
    ol.append(li);
  }
}

function renderFiles() {
  const ul = $('file-list');
  ul.replaceChildren();
  for (const name of Object.keys(state.edited).sort()) {
    const li = el('li');
    const b = el('button', 'file', name);
    b.type = 'button';
    b.dataset.file = name;
    if (state.edited[name] !== state.files[name]) b.classList.add('modified');
    if (name === state.current) b.classList.add('current');
    b.addEventListener('click', () => openFile(name));
    li.append(b);
    ul.append(li);
  }
}

function openFile(name, line) {
  state.current = name;
  $('file-name').textContent = name;
  const ed = $('editor');
  ed.value = state.edited[name] || '';
  renderFiles();
  renderDiff();
  if (line) {
    const lines = ed.value.split('\n');
    const start = lines.slice(0, line - 1).join('\n').length + (line > 1 ? 1 : 0);
    ed.focus();
    ed.setSelectionRange(start, start + (lines[line - 1] || '').length);
  }
}

function onEdit() {
  state.edited[state.current] = $('editor').value;
  renderFiles();
  renderDiff();
  clearTimeout(state.checkTimer);
  state.checkTimer = setTimeout(() => check(false), 600);
}

function showProblems(problems, okText) {
  const ul = $('problems');
  ul.replaceChildren();
  if (!problems.length) {
    ul.append(el('li', 'ok', okText || 'No problems.'));
    return;
  }
  for (const p of problems) {
    const li = el('li', 'problem');
    const where = p.file + (p.line ? ':' + p.line : '');
    const b = el('button', 'where mono', where);
    b.type = 'button';
    b.addEventListener('click', () => {
      const f = Object.keys(state.edited).find((k) => p.file === k || p.file.endsWith('/' + k) || p.file.endsWith(k));
      if (f) openFile(f, p.line);
    });
    li.append(b, ' ', p.message);
    ul.append(li);
  }
}

async function check(gate) {
  const r = await api('POST', '/v1/harness/check', { files: state.edited, gate });
  const report = $('gate-report');
  report.hidden = true;
  if (r.status === 200) {
    showProblems([], 'No problems: this edit would be harness ' + short(r.json.hash) + '.');
    if (gate) {
      report.hidden = false;
      report.textContent = r.json.gate ? (r.json.gate.passed ? 'Gate passed.' : 'Gate refused:\n' + r.json.gate.report)
        : 'This server has no regression gate (start hat serve with --gate).';
    }
  } else if (r.status === 422 && r.json && r.json.error.problems) {
    showProblems(r.json.error.problems);
  } else if (r.status === 422) {
    report.hidden = false;
    report.textContent = errorText(r);
    showProblems([{ file: '(gate)', line: null, message: 'the regression gate refused this edit' }]);
  } else {
    showProblems([{ file: '(request)', line: null, message: errorText(r) }]);
  }
}

async function activate() {
  const r = await api('POST', '/v1/harness/files', { files: state.edited, executable: state.executable });
  if (r.status === 200) {
    status('harness ' + short(r.json.active) + ' is active');
    await loadHarness();
    $('active-harness').textContent = 'harness ' + short(r.json.active);
  } else if (r.json && r.json.error && r.json.error.problems) {
    showProblems(r.json.error.problems);
    status('not activated: the edit has problems; the active harness keeps serving', true);
  } else {
    status('not activated: ' + errorText(r), true);
  }
}

async function rollback(hash) {
  const r = await api('POST', '/v1/harness/rollback', { hash });
  if (r.status === 200) {
    status('rolled back to ' + short(r.json.active));
    await loadHarness();
    $('active-harness').textContent = 'harness ' + short(r.json.active);
  } else {
    status('roll back: ' + errorText(r), true);
  }
}

// A line diff (longest common subsequence) of the open file against the active version.
function renderDiff() {
  const a = (state.files[state.current] || '').split('\n');
  const b = (state.edited[state.current] || '').split('\n');
  const out = $('diff');
  if (state.files[state.current] === state.edited[state.current]) { out.textContent = 'No changes.'; return; }
  if (a.length * b.length > 4e6) { out.textContent = 'The file is too large to diff here.'; return; }
  const n = a.length, m = b.length;
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    }
  }
  out.replaceChildren();
  let i = 0, j = 0;
  const line = (cls, sign, text) => out.append(el('span', cls, sign + ' ' + text + '\n'));
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { i++; j++; continue; }
    if (j < m && (i >= n || L[i][j + 1] >= L[i + 1][j])) { line('add', '+', b[j]); j++; }
    else { line('del', '-', a[i]); i++; }
  }
}

// ---------------------------------------------------------------- metrics

function parseMetrics(text) {
  const m = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const match = line.match(/^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!match) continue;
    const key = match[1] + (match[2] || '');
    m[key] = Number(match[3]);
  }
  return m;
}

function buckets(m, name) {
  const out = [];
  for (const [k, v] of Object.entries(m)) {
    const b = k.match(new RegExp('^' + name + '_bucket\\{le="([^"]+)"\\}$'));
    if (b) out.push([b[1] === '+Inf' ? Infinity : Number(b[1]), v]);
  }
  return out.sort((x, y) => x[0] - y[0]);
}

function quantile(bs, q) {
  const total = bs.length ? bs[bs.length - 1][1] : 0;
  if (!total) return null;
  let prevLe = 0, prevC = 0;
  for (const [le, c] of bs) {
    if (c >= q * total) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((q * total - prevC) / Math.max(c - prevC, 1e-9));
    }
    prevLe = le; prevC = c;
  }
  return prevLe;
}

function sum(m, prefix) {
  return Object.entries(m).filter(([k]) => k === prefix || k.startsWith(prefix + '{')).reduce((s, [, v]) => s + v, 0);
}

async function pollMetrics() {
  let r;
  try { r = await api('GET', '/metrics'); } catch (_) { return; }
  if (r.status !== 200) return;
  const m = parseMetrics(r.text);
  const bs = buckets(m, 'hat_reply_latency_seconds');
  const p50 = quantile(bs, 0.5), p95 = quantile(bs, 0.95);
  $('m-replies').textContent = String(sum(m, 'hat_replies_total'));
  $('m-p50').textContent = p50 === null ? '-' : secs(p50);
  $('m-p95').textContent = p95 === null ? '-' : secs(p95);
  $('m-queue').textContent = String(sum(m, 'hat_queue_depth'));
  const prompt = sum(m, 'hat_prompt_tokens_total'), cached = sum(m, 'hat_cached_prompt_tokens_total');
  $('m-cache').textContent = prompt ? (100 * cached / prompt).toFixed(1) + '%' : '-';
  $('m-dropped').textContent = String(sum(m, 'hat_comments_dropped_total'));
  if (p50 !== null) {
    state.series.push([Date.now(), p50, p95]);
    if (state.series.length > 300) state.series.shift();
  }
  drawSeries();
  drawHistogram(bs);
}

const SVG = 'http://www.w3.org/2000/svg';
function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawSeries() {
  const svg = $('chart-latency');
  svg.replaceChildren();
  const s = state.series;
  if (s.length < 2) { svg.append(svgEl('text', { x: 10, y: 100 }, 'waiting for replies...')); return; }
  const t0 = s[0][0], t1 = s[s.length - 1][0];
  const ymax = Math.max(...s.map((p) => p[2])) * 1.1 || 1;
  const X = (t) => 40 + 550 * (t - t0) / Math.max(t1 - t0, 1);
  const Y = (v) => 190 - 180 * v / ymax;
  for (const [i, cls] of [[1, 'p50'], [2, 'p95']]) {
    svg.append(svgEl('polyline', { class: cls, points: s.map((p) => X(p[0]) + ',' + Y(p[i])).join(' ') }));
  }
  svg.append(svgEl('text', { x: 2, y: 14 }, ymax.toFixed(1) + ' s'), svgEl('text', { x: 2, y: 195 }, '0'));
}

function drawHistogram(bs) {
  const svg = $('chart-hist');
  svg.replaceChildren();
  const counts = bs.map(([le, c], i) => [le, c - (i ? bs[i - 1][1] : 0)]);
  const max = Math.max(1, ...counts.map((c) => c[1]));
  const w = 560 / Math.max(counts.length, 1);
  counts.forEach(([le, c], i) => {
    const h = 170 * c / max;
    svg.append(svgEl('rect', { class: 'bar', x: 30 + i * w, y: 180 - h, width: w - 2, height: h }));
    svg.append(svgEl('text', { x: 30 + i * w, y: 196, class: 'tick' }, le === Infinity ? '+' : (le < 1 ? le.toFixed(2) : le < 10 ? le.toFixed(1) : le.toFixed(0))));
  });
}

// ---------------------------------------------------------------- runs

const COLORS = ['#2b59c3', '#b42318', '#067647', '#8a5a00', '#6941c6', '#0e7490', '#c11574', '#475467'];
const runState = { data: null, evals: new Set(), training: new Set() };

async function loadRuns() {
  const r = await api('GET', '/v1/runs');
  if (r.status !== 200) { status('runs: ' + errorText(r), true); return; }
  runState.data = r.json;
  if (!runState.evals.size) r.json.evals.slice(0, 6).forEach((e) => runState.evals.add(e.name));
  if (!runState.training.size) r.json.training.slice(0, 4).forEach((t) => runState.training.add(t.name));
  renderRuns();
}

function checkbox(set, name, label) {
  const lab = el('label');
  const cb = el('input');
  cb.type = 'checkbox';
  cb.checked = set.has(name);
  cb.addEventListener('change', () => { if (cb.checked) set.add(name); else set.delete(name); renderRuns(); });
  lab.append(cb, ' ', label === undefined ? name : label);
  return lab;
}

function renderRuns() {
  const d = runState.data;
  if (!d) return;
  const tbody = document.querySelector('#eval-table tbody');
  tbody.replaceChildren();
  const fmt = (x) => (x === undefined ? '-' : x.toFixed(1));
  for (const e of d.evals) {
    const tr = el('tr');
    const td0 = el('td');
    td0.append(checkbox(runState.evals, e.name, ''));
    tr.append(td0, el('td', 'mono', e.name), el('td', '', fmt(e.scores.lsqa)), el('td', '', fmt(e.scores.hvqa)),
      el('td', '', fmt(e.scores.ifeval)), el('td', 'mono', e.model || ''));
    tbody.append(tr);
  }
  if (!d.evals.length) tbody.append(el('tr', '', 'No evaluation runs under --runs.'));
  const list = $('train-list');
  list.replaceChildren(...d.training.map((t) => { const li = el('li'); li.append(checkbox(runState.training, t.name)); return li; }));
  drawEvals(d.evals.filter((e) => runState.evals.has(e.name)));
  drawTraining(d.training.filter((t) => runState.training.has(t.name)));
}

function drawEvals(evals) {
  const svg = $('chart-evals');
  svg.replaceChildren();
  const suites = ['lsqa', 'hvqa', 'ifeval'];
  const gw = 540 / suites.length;
  const bw = Math.min(24, (gw - 20) / Math.max(evals.length, 1));
  suites.forEach((s, i) => {
    svg.append(svgEl('text', { x: 40 + i * gw + gw / 2 - 12, y: 214 }, s));
    evals.forEach((e, j) => {
      const v = e.scores[s];
      if (v === undefined) return;
      const h = 180 * v / 100;
      const r = svgEl('rect', { x: 40 + i * gw + 10 + j * bw, y: 200 - h, width: bw - 2, height: h, fill: COLORS[j % COLORS.length] });
      r.append(svgEl('title', {}, e.name + ' ' + s + ': ' + v.toFixed(1)));
      svg.append(r);
    });
  });
  svg.append(svgEl('text', { x: 2, y: 24 }, '100'), svgEl('text', { x: 2, y: 204 }, '0'));
  evals.forEach((e, j) => svg.append(svgEl('text', { x: 420, y: 14 + 12 * j, fill: COLORS[j % COLORS.length] }, e.name)));
}

function drawTraining(runs) {
  const svg = $('chart-train');
  svg.replaceChildren();
  const pts = runs.flatMap((r) => r.loss.concat(r.val_loss));
  if (!pts.length) { svg.append(svgEl('text', { x: 10, y: 100 }, 'No training runs selected.')); return; }
  const smax = Math.max(...pts.map((p) => p[0]));
  const ymax = Math.max(...pts.map((p) => p[1])) * 1.05;
  const X = (s) => 40 + 550 * s / Math.max(smax, 1);
  const Y = (v) => 200 - 190 * v / ymax;
  runs.forEach((r, j) => {
    const c = COLORS[j % COLORS.length];
    svg.append(svgEl('polyline', { fill: 'none', stroke: c, 'stroke-width': 1.5, points: r.loss.map((p) => X(p[0]) + ',' + Y(p[1])).join(' ') }));
    for (const p of r.val_loss) svg.append(svgEl('circle', { cx: X(p[0]), cy: Y(p[1]), r: 3, fill: c }));
    svg.append(svgEl('text', { x: 420, y: 14 + 12 * j, fill: c }, r.name));
  });
  svg.append(svgEl('text', { x: 2, y: 14 }, ymax.toFixed(2)), svgEl('text', { x: 2, y: 204 }, '0'),
    svgEl('text', { x: 560, y: 214 }, 'step ' + smax));
}

// ---------------------------------------------------------------- A/B experiments

async function loadExperiments() {
  const [h, x, runs] = await Promise.all([api('GET', '/v1/harness'), api('GET', '/v1/experiments'), api('GET', '/v1/runs')]);
  const sim = $('ab-sim');
  sim.replaceChildren();
  const abRuns = (runs.json && runs.json.ab) || [];
  if (!abRuns.length) sim.append(el('p', 'hint', 'No hat ab run results under --runs.'));
  for (const a of abRuns) {
    sim.append(experimentCard({ name: a.experiment, simulated: a.name, report: a.report }));
  }
  if (h.json) {
    const opts = () => (h.json.versions || []).slice().reverse().map((v) => {
      const o = el('option', '', short(v.hash) + ' ' + v.name + (v.active ? ' (active)' : ''));
      o.value = v.hash;
      return o;
    });
    $('ab-control').replaceChildren(...opts());
    $('ab-treatment').replaceChildren(...opts());
    // the active version is the natural control; the newest other version the treatment
    $('ab-control').value = h.json.active;
    const other = (h.json.versions || []).slice().reverse().find((v) => v.hash !== h.json.active);
    if (other) $('ab-treatment').value = other.hash;
  }
  const list = $('ab-list');
  list.replaceChildren();
  if (!x.json) { status('experiments: ' + errorText(x), true); return; }
  // the server's own model first, then those it was started with for arms (--arm-model)
  for (const id of ['ab-control-model', 'ab-treatment-model']) {
    const s = $(id);
    const keep = s.value;
    s.replaceChildren(...(x.json.models || []).map((m, i) => {
      const o = el('option', '', m + (i === 0 ? ' (served)' : ''));
      o.value = i === 0 ? '' : m;
      return o;
    }));
    if (keep) s.value = keep;
  }
  if (!x.json.experiments.length) list.append(el('p', 'hint', 'No experiments yet.'));
  for (const e of x.json.experiments) list.append(experimentCard(e));
}

function experimentCard(e) {
  const div = el('div', 'experiment');
  const state = e.simulated ? ' (simulated audience, runs/' + e.simulated + ')' : (e.running ? ' (running)' : ' (stopped)');
  const head = el('h2', '', e.name + state);
  div.append(head);
  if (e.running) {
    const b = el('button', 'stop', 'Stop');
    b.type = 'button';
    b.addEventListener('click', async () => {
      const r = await api('POST', '/v1/experiments/' + encodeURIComponent(e.name) + '/stop', {});
      if (r.status === 200) { status('experiment ' + e.name + ' stopped'); loadExperiments(); }
      else status('stop: ' + errorText(r), true);
    });
    div.append(b);
  }
  if (e.note) div.append(el('p', 'hint', e.note));
  const rep = e.report;
  div.append(el('p', 'hint', 'unit ' + rep.unit + '; arms: ' + rep.arms.map((a) => a.name + ' (' + (a.harness.startsWith('sha256:') ? short(a.harness) : a.harness) + ', ' + a.model + ', ' + a.viewers + ' viewers)').join(', ')));
  const t = el('table', 'runs-table');
  const hr = el('tr');
  for (const h of ['metric', 'arm', 'control', 'arm mean', 'difference', 'always-valid interval', 'Welch interval', 'units', 'significant']) hr.append(el('th', '', h));
  t.append(hr);
  const f = (x) => (typeof x === 'number' ? (Math.abs(x) >= 100 ? x.toFixed(1) : x.toFixed(3)) : '-');
  const iv = (i) => (i ? '[' + f(i.lo) + ', ' + f(i.hi) + ']' : '-');
  for (const m of rep.metrics) {
    for (const c of m.comparisons) {
      const k = c.comparison;
      const tr = el('tr', k.significant ? 'significant' : '');
      tr.append(el('td', '', m.metric), el('td', '', c.arm), el('td', '', f(k.mean_a)), el('td', '', f(k.mean_b)),
        el('td', '', f(k.diff)), el('td', '', iv(k.always_valid)), el('td', '', iv(k.welch)),
        el('td', '', k.n_a + ' / ' + k.n_b), el('td', '', k.significant ? 'yes' : 'no'));
      t.append(tr);
    }
  }
  div.append(t);
  return div;
}

async function startExperiment(ev) {
  ev.preventDefault();
  const body = {
    name: $('ab-name').value.trim(),
    unit: $('ab-unit').value,
    arms: [{ name: 'control', harness: $('ab-control').value }, { name: 'treatment', harness: $('ab-treatment').value }],
  };
  // an arm without a model uses the served one
  const models = [$('ab-control-model').value, $('ab-treatment-model').value];
  models.forEach((m, i) => { if (m) body.arms[i].model = m; });
  const r = await api('POST', '/v1/experiments', body);
  if (r.status === 201) { status('experiment ' + body.name + ' started'); loadExperiments(); }
  else status('not started: ' + errorText(r), true);
}

// ---------------------------------------------------------------- wiring

function init() {
  for (const b of document.querySelectorAll('[role=tab]')) b.addEventListener('click', () => show(b.dataset.view));
  document.addEventListener('keydown', (e) => {
    const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
    if (!typing && !e.ctrlKey && !e.metaKey && !e.altKey && ['1', '2', '3', '4', '5'].includes(e.key)) {
      show(['live', 'harness', 'metrics', 'runs', 'ab'][Number(e.key) - 1]);
    }
  });
  $('login').addEventListener('submit', (e) => {
    e.preventDefault();
    state.token = $('token').value;
    $('token').value = '';
    sessionStorage.setItem('hat-token', state.token);
    $('login').hidden = true;
    loadStreams();
  });
  $('stream-select').addEventListener('change', (e) => { state.stream = e.target.value; follow(state.stream); });
  $('stream-new').addEventListener('click', newStream);
  $('simulate').addEventListener('change', (e) => simulate(e.target.checked));
  $('comment-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('comment-text').value.trim();
    if (text) { postComment($('comment-viewer').value.trim() || 'viewer', text); $('comment-text').value = ''; }
  });
  $('comment-text').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) $('comment-form').requestSubmit();
  });
  $('editor').addEventListener('input', onEdit);
  $('ab-form').addEventListener('submit', startExperiment);
  $('harness-check').addEventListener('click', () => check(false));
  $('harness-gate').addEventListener('click', () => check(true));
  $('harness-activate').addEventListener('click', activate);
  $('harness-revert').addEventListener('click', () => { state.edited = Object.assign({}, state.files); openFile(state.current); showProblems([]); });
  if (new URLSearchParams(location.search).get('simulate') === '1') {
    $('simulate').checked = true;
  }
  loadStreams().then(() => { if ($('simulate').checked) simulate(true); }).catch((e) => status(String(e.message || e), true));
  setInterval(pollMetrics, 3000);
}

document.addEventListener('DOMContentLoaded', init);
