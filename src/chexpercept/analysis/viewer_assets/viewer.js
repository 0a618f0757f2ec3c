/* CheXpercept case viewer (Stage 04): index of cases with filters, one page per case, two runs
 * side by side. Plain JavaScript, no dependencies; data comes from data/index.js
 * (window.CHEX_INDEX) and data/r<run>_c<chunk>.js (window.chexChunk), loaded by <script> tags
 * because fetch() is refused on file:// pages. Text from the runs is only ever set as text
 * (never parsed as HTML). Layout and keys: docs/viewer.md. */
"use strict";
(function () {
  const IDX = window.CHEX_INDEX;
  if (!IDX) {
    document.body.textContent = "data/index.js did not load: open index.html from the viewer folder.";
    return;
  }
  const N = IDX.keys.length;
  const PAGE = 100;
  const STAGES = ["detection", "contour evaluation", "contour revision", "attributes"];
  const state = {
    a: 0, b: IDX.runs.length > 1 ? 1 : -1, lesion: "", path: "", depth: "", correct: "",
    status: "", pair: "", pairStage: "all", text: "", sortKey: "order", sortDir: 1, page: 0,
    error: "",
  };
  let filtered = [];
  let current = -1;
  const loading = {};
  const details = IDX.runs.map(() => ({}));
  const haystack = IDX.runs.map(() => ({}));
  const keyIndex = new Map(IDX.keys.map((k, i) => [k, i]));

  // ---- small DOM helpers -------------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    }
    return node;
  }
  const $ = (id) => document.getElementById(id);
  function option(value, label, selected) {
    return el("option", { value, selected: String(value) === String(selected) }, label);
  }

  // ---- lazily loaded details ---------------------------------------------------------------
  window.chexChunk = function (r, c, payload) {
    for (const key of Object.keys(payload)) {
      details[r][key] = payload[key];
      const i = keyIndex.get(key);
      haystack[r][i] = payload[key].turns.map((t) => String(t.raw || "")).join("\n").toLowerCase();
    }
  };
  function loadChunk(r, c) {
    const id = r + "_" + c;
    if (!IDX.runs[r].chunks.includes(c)) return Promise.resolve();
    if (!loading[id]) {
      loading[id] = new Promise((resolve, reject) => {
        const s = el("script", { src: "data/r" + r + "_c" + c + ".js" });
        s.onload = () => resolve();
        s.onerror = () => reject(new Error("could not load data/r" + r + "_c" + c + ".js"));
        document.head.appendChild(s);
      });
    }
    return loading[id];
  }
  function loadCase(r, i) {  // the case's position in run r's file picks its chunk
    const p = IDX.results[r].pos[i];
    return p === null ? Promise.resolve() : loadChunk(r, Math.floor(p / IDX.chunk_size));
  }
  function loadAll(r) { return Promise.all(IDX.runs[r].chunks.map((c) => loadChunk(r, c))); }

  // ---- per-case predicates -----------------------------------------------------------------
  const res = (r) => IDX.results[r];
  const codes = (r, i) => res(r).codes[i];
  function allRight(r, i) {
    const c = codes(r, i);
    return c !== null && !res(r).unfinished[i] && !/[0?]/.test(c);
  }
  function stageRight(r, i, k) { const c = codes(r, i); return c !== null && c[k - 1] === "1"; }
  function stageWrong(r, i, k) {
    const c = codes(r, i);
    return c !== null && !res(r).unfinished[i] && /[0?]/.test(c[k - 1]);
  }
  function pairRight(r, i) {
    return state.pairStage === "all" ? allRight(r, i) : stageRight(r, i, +state.pairStage);
  }
  function pairWrong(r, i) {
    if (codes(r, i) === null || res(r).unfinished[i]) return false;
    return state.pairStage === "all" ? !allRight(r, i) : stageWrong(r, i, +state.pairStage);
  }
  // an unfinished case is missing, never wrong (as in Stage 04's tables)
  function isWrong(r, i) { return codes(r, i) !== null && !res(r).unfinished[i] && !allRight(r, i); }

  function matches(i) {
    const a = state.a, b = state.b;
    if (codes(a, i) === null && (b < 0 || codes(b, i) === null)) return false;
    if (state.lesion && IDX.lesion[i] !== state.lesion) return false;
    if (state.path && IDX.path[i] !== state.path) return false;
    if (state.depth !== "" && res(a).depth[i] !== +state.depth) return false;
    if (state.correct) {
      const m = /^s(\d)([rw])$/.exec(state.correct);
      if (state.correct === "right" && !allRight(a, i)) return false;
      if (state.correct === "wrong" && !isWrong(a, i)) return false;
      if (m && m[2] === "r" && !stageRight(a, i, +m[1])) return false;
      if (m && m[2] === "w" && !stageWrong(a, i, +m[1])) return false;
    }
    if (state.status === "u" && !res(a).unfinished[i]) return false;
    if (state.status !== "" && state.status !== "u" && !(res(a).status[i] & (1 << +state.status))) return false;
    // error class (run A): bit j of results[a].errors is the j-th of IDX.error_classes
    if (state.error !== "" && !((res(a).errors || [])[i] & (1 << +state.error))) return false;
    if (b >= 0 && state.pair) {
      const want = { ArBw: [pairRight, pairWrong], AwBr: [pairWrong, pairRight],
                     ArBr: [pairRight, pairRight], AwBw: [pairWrong, pairWrong] }[state.pair];
      if (!(want[0](a, i) && want[1](b, i))) return false;
    }
    if (state.text) {
      const q = state.text.toLowerCase();
      const inA = (haystack[a][i] || "").includes(q);
      const inB = b >= 0 && (haystack[b][i] || "").includes(q);
      if (!inA && !inB) return false;
    }
    return true;
  }

  // ---- filters and index -------------------------------------------------------------------
  function fillFilters() {
    const s = state;
    $("f-lesion").replaceChildren(option("", "(all)", s.lesion),
      ...IDX.lesions.filter((l) => IDX.lesion.includes(l)).map((l) => option(l, l, s.lesion)));
    $("f-path").replaceChildren(option("", "(all)", s.path),
      ...IDX.paths.map((p) => option(p, p, s.path)));
    $("f-depth").replaceChildren(option("", "(all)", s.depth),
      ...[0, 1, 2, 3, 4].map((d) => option(d, String(d), s.depth)));
    const correct = [option("", "(all)", s.correct), option("right", "all stages right", s.correct),
                     option("wrong", "some stage wrong", s.correct)];
    for (let k = 1; k <= 4; k++) {
      correct.push(option("s" + k + "r", "stage " + k + " right", s.correct));
      correct.push(option("s" + k + "w", "stage " + k + " wrong", s.correct));
    }
    $("f-correct").replaceChildren(...correct);
    $("f-status").replaceChildren(option("", "(all)", s.status),
      ...IDX.statuses.map((st, j) => option(j, "some turn " + st, s.status)),
      option("u", "unfinished (missing, not scored)", s.status));
    const errorNames = res(s.a).errors ? IDX.error_classes || [] : [];
    if (!errorNames.length) s.error = "";  // run A has no error classes: no such filter
    $("f-error").replaceChildren(option("", "(all)", s.error),
      ...errorNames.map((c, j) => option(j, "error class: " + c.replace(/_/g, " "), s.error)));
    $("f-error").closest("label").hidden = !errorNames.length;
    $("f-pair").replaceChildren(option("", "(all)", s.pair), option("ArBw", "A right, B wrong", s.pair),
      option("AwBr", "A wrong, B right", s.pair), option("ArBr", "both right", s.pair),
      option("AwBw", "both wrong", s.pair));
    $("f-pair-stage").replaceChildren(option("all", "all stages", s.pairStage),
      ...[1, 2, 3, 4].map((k) => option(k, "stage " + k, s.pairStage)));
    $("f-text").value = s.text;
    const runs = IDX.runs.map((r, j) => option(j, r.label, s.a));
    $("run-a").replaceChildren(...runs);
    $("run-b").replaceChildren(option(-1, "(none)", s.b),
      ...IDX.runs.map((r, j) => option(j, r.label, s.b)));
    for (const node of document.querySelectorAll(".pair-only")) node.hidden = s.b < 0;
  }

  function sortValue(i) {
    const k = state.sortKey;
    if (k === "order") return i;
    if (k === "key") return IDX.keys[i];
    if (k === "lesion") return IDX.lesion[i];
    if (k === "path") return IDX.path[i];
    const m = /^(a|b)(depth|s\d)$/.exec(k);
    if (m) {
      const r = m[1] === "a" ? state.a : state.b;
      if (r < 0 || codes(r, i) === null) return -1;
      return m[2] === "depth" ? res(r).depth[i] : "-?01".indexOf(codes(r, i)[+m[2][1] - 1]);
    }
    return i;
  }

  function applyFilters() {
    const out = [];
    for (let i = 0; i < N; i++) if (matches(i)) out.push(i);
    if (state.sortKey !== "order" || state.sortDir !== 1) {
      const vals = new Map(out.map((i) => [i, sortValue(i)]));
      out.sort((x, y) => {
        const u = vals.get(x), v = vals.get(y);
        return (u < v ? -1 : u > v ? 1 : x - y) * state.sortDir;
      });
    }
    filtered = out;
    state.page = Math.min(state.page, Math.max(0, Math.ceil(out.length / PAGE) - 1));
    renderCounts();
    renderTable();
  }

  function refilter() {
    const need = [state.a, state.b].filter((r) => r >= 0);
    if (!state.text) { applyFilters(); return; }
    $("counts").textContent = "loading the replies for the text search ...";
    Promise.all(need.map(loadAll)).then(applyFilters, showError);
  }

  function countWhere(pred) { let n = 0; for (const i of filtered) if (pred(i)) n++; return n; }

  function renderCounts() {
    const a = state.a, b = state.b;
    const parts = [el("span", { class: "count", id: "count-shown", text: String(filtered.length) }),
                   " of ", el("span", { id: "count-total", text: String(N) }), " cases"];
    const byPath = IDX.paths.map((p) => p + " " + countWhere((i) => IDX.path[i] === p));
    parts.push(" (" + byPath.join(", ") + ")");
    parts.push("; A all stages right: ",
               el("span", { id: "count-a-right", text: String(countWhere((i) => allRight(a, i))) }));
    if (b >= 0) {
      parts.push("; A right, B wrong: ",
        el("span", { id: "count-arbw", text: String(countWhere((i) => pairRight(a, i) && pairWrong(b, i))) }),
        "; A wrong, B right: ",
        el("span", { id: "count-awbr", text: String(countWhere((i) => pairWrong(a, i) && pairRight(b, i))) }));
    }
    $("counts").replaceChildren(...parts);
  }

  function stageCell(r, i, k, extra) {
    const c = r < 0 || codes(r, i) === null ? " " : codes(r, i)[k - 1];
    const cls = { "1": "r1", "0": "r0", "?": "rq", "-": "rn" }[c] || "rn";
    const txt = { "1": "\u2713", "0": "\u2717", "?": "?", "-": "\u2013" }[c] || "";
    const title = c === "?" ? "expected but missing (counted wrong)" : null;
    return el("td", { class: cls + (extra ? " " + extra : ""), title }, txt);
  }

  function statusText(r, i) {
    const mask = res(r).status[i];
    const names = IDX.statuses.filter((_, j) => mask & (1 << j));
    const un = res(r).unfinished[i] ? ["unfinished"] : [];
    return names.concat(un).join(", ");
  }

  function renderTable() {
    const b = state.b;
    const cols = [["order", "#"], ["key", "key_id"], ["lesion", "lesion"], ["path", "path"],
                  ["as1", "A S1"], ["as2", "A S2"], ["as3", "A S3"], ["as4", "A S4"],
                  ["adepth", "A depth"], ["", "A status"]];
    if (b >= 0) cols.push(["bs1", "B S1"], ["bs2", "B S2"], ["bs3", "B S3"], ["bs4", "B S4"],
                          ["bdepth", "B depth"], ["", "B status"]);
    const tips = { s1: "stage 1, detection", s2: "stage 2, contour evaluation",
                   s3: "stage 3, contour revision", s4: "stage 4, attributes",
                   depth: "end-to-end depth: stages right from stage 1 on" };
    $("cases-head").replaceChildren(...cols.map(([key, label]) => el("th", {
      title: tips[key.slice(1)] || null,
      class: key && key === state.sortKey ? (state.sortDir > 0 ? "sorted-asc" : "sorted-desc") : null,
      "data-sort": key || null,
      onclick: key ? () => {
        if (state.sortKey === key) state.sortDir = -state.sortDir;
        else { state.sortKey = key; state.sortDir = 1; }
        applyFilters();
      } : null,
    }, label)));
    const rows = filtered.slice(state.page * PAGE, (state.page + 1) * PAGE).map((i) => {
      const a = state.a;
      const cells = [el("td", {}, String(i + 1)), el("td", { class: "key" }, IDX.keys[i]),
                     el("td", {}, IDX.lesion[i]), el("td", {}, IDX.path[i])];
      for (let k = 1; k <= 4; k++) cells.push(stageCell(a, i, k));
      cells.push(el("td", {}, codes(a, i) === null ? "" : String(res(a).depth[i])),
                 el("td", {}, codes(a, i) === null ? "not in run" : statusText(a, i)));
      if (b >= 0) {
        for (let k = 1; k <= 4; k++) cells.push(stageCell(b, i, k, k === 1 ? "run-b" : ""));
        cells.push(el("td", {}, codes(b, i) === null ? "" : String(res(b).depth[i])),
                   el("td", {}, codes(b, i) === null ? "not in run" : statusText(b, i)));
      }
      return el("tr", { "data-key": IDX.keys[i], onclick: () => openCase(i) }, cells);
    });
    $("cases-body").replaceChildren(...rows);
    const pages = Math.max(1, Math.ceil(filtered.length / PAGE));
    $("pager").replaceChildren(
      el("button", { type: "button", disabled: state.page === 0,
                     onclick: () => { state.page--; renderTable(); } }, "\u2190 previous"),
      el("span", { id: "page-label" }, "page " + (state.page + 1) + " of " + pages),
      el("button", { type: "button", disabled: state.page >= pages - 1,
                     onclick: () => { state.page++; renderTable(); } }, "next \u2192"));
  }

  function runCard(r, role) {
    const run = IDX.runs[r];
    const m = run.manifest || {};
    const commit = m.git_commit ? String(m.git_commit).slice(0, 12) + (m.git_dirty ? " (dirty)" : "") : "n/a";
    return el("div", { class: "run-card", "data-run": role },
      el("b", {}, role + ": " + run.label), el("br"),
      "model ", el("code", {}, String(m.model ?? "n/a")), ", provider ",
      el("code", {}, String(m.provider ?? "n/a")), ", oracle ", String(run.oracle_setting),
      ", seed ", String(m.seed ?? "n/a"), ", no_thinking ", String(m.no_thinking ?? "n/a"), el("br"),
      "settings ", el("code", {}, JSON.stringify(m.provider_settings ?? {})), el("br"),
      "commit ", el("code", {}, commit), ", created ", String(m.created_at ?? "n/a"),
      ", cases ", String(run.n_cases),
      run.missing_images ? ", " + run.missing_images + " image(s) missing" : "");
  }

  function renderMeta() {
    const cards = [runCard(state.a, "A")];
    if (state.b >= 0) cards.push(runCard(state.b, "B"));
    $("run-meta").replaceChildren(...cards);
  }

  // ---- one case ----------------------------------------------------------------------------
  function optionTexts(text) {
    const out = {};
    for (const m of String(text).matchAll(/^\((\d+)\)\s*(.+)$/gm)) out[m[1]] = m[2];
    return out;
  }
  function answerText(value, opts) {
    if (value === null || value === undefined || value === "") return "none";
    const list = Array.isArray(value) ? value : [value];
    return list.map((v) => (opts[String(v)] ? v + " (" + opts[String(v)] + ")" : String(v))).join(", ");
  }

  // The error classes (docs/metrics.md, "Error anatomy") run r made on case i, or "".
  function errorClassText(r, i) {
    const bits = (res(r).errors || [])[i] || 0;
    const names = (IDX.error_classes || []).filter((_, j) => bits & (1 << j));
    return names.length ? "error classes: " + names.map((c) => c.replace(/_/g, " ")).join(", ") : "";
  }

  // An unfinished case's reason as a sentence (the all_results.json marker: next_turn,
  // turns_answered, reason; docs/engines.md, "Faults").
  function unfinishedText(u) {
    const n = Number(u.turns_answered ?? 0);
    const answered = n === 1 ? "1 turn answered" : n + " turns answered";
    const next = u.next_turn ? "; no answer to " + u.next_turn : "";
    const reason = String(u.reason ?? "").trim();
    return "Unfinished case: " + answered + next + (reason ? " (" + reason + ")" : "") +
      ". Stage 04 counts it as missing, not wrong; re-running Stage 03 completes it.";
  }

  function turnCell(r, t, turnsByName, unfinished) {
    if (!t) return el("div", { class: "msg loading" }, unfinished
      ? "no answer in this run: the case is unfinished (see above)"
      : "not asked in this run (or no answer recorded)");
    const opts = optionTexts(t.text);
    const parts = [];
    for (const name of t.patched_before || []) {
      const patched = turnsByName[name];
      parts.push(el("div", { class: "oracle implicit", "data-oracle": "implicit" },
        el("span", { class: "role" }, "Oracle (implicit), applied before this question"),
        "The model's reply to " + name + " was wrong; in this request the history shows it as:\n",
        el("b", {}, patched && patched.replayed ? patched.replayed : "(the ground truth)")));
    }
    if (t.prefix) {
      parts.push(el("div", { class: "oracle explicit", "data-oracle": "explicit" },
        el("span", { class: "role" }, "Oracle (explicit), sent as part of this message"), t.prefix));
    }
    parts.push(el("div", { class: "msg user" }, el("span", { class: "role" }, "User"), t.text));
    if (t.images && t.images.length) {
      const multi = t.images.length > 1;
      parts.push(el("div", { class: "images" + (multi ? " options" : "") }, t.images.map((im, j) =>
        el("figure", {},
          im.url ? el("img", { src: im.url, alt: im.name, title: "click to enlarge",
                               onclick: () => zoom(im.url, im.name) })
                 : el("div", { class: "missing-img" }, "image missing: " + im.name),
          el("figcaption", {}, multi ? "option " + (j + 1) + ": " + im.name : im.name)))));
    }
    parts.push(el("div", { class: "msg reply" }, el("span", { class: "role" }, "Assistant (the model's reply)"),
                  String(t.raw ?? "")));
    if (t.replayed !== null && t.replayed !== undefined) {
      parts.push(el("div", { class: "oracle implicit", "data-oracle": "implicit-replaced" },
        el("span", { class: "role" }, "Oracle (implicit)"),
        "Later requests replayed this reply as: ", el("b", {}, t.replayed)));
    }
    const ok = t.correct === true;
    const counted = t.usage ? Object.entries(t.usage).filter(([, v]) => v) : [];
    const usage = counted.length ? counted.map(([k, v]) => k + " " + v).join(", ") : null;
    const rows = [["result", el("span", { class: "badge " + (ok ? "ok" : "bad") }, ok ? "correct" : "wrong")],
                  ["parsed answer", answerText(t.answer ?? t.parsed, opts)],
                  ["ground truth", "gt" in t ? answerText(t.gt, opts) : "not recorded"],
                  ["status", String(t.status ?? "n/a")],
                  ["parser's reason", String(t.detail || "\u2013")]];
    if (t.finish_reason) rows.push(["finish reason", String(t.finish_reason)]);
    if (t.latency_s !== undefined && t.latency_s !== null) rows.push(["latency", Number(t.latency_s).toFixed(2) + " s"]);
    if (usage) rows.push(["tokens", usage]);
    if (t.error) rows.push(["error", String(t.error)]);
    parts.push(el("dl", { class: "verdict" }, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])));
    return el("div", { class: "turn-cell", "data-run": String(r) }, parts);
  }

  function renderCase(i) {
    const runs = [state.a, state.b].filter((r) => r >= 0);
    const two = runs.length > 1;
    const pos = filtered.indexOf(i);
    $("case-nav").replaceChildren(
      el("button", { type: "button", onclick: () => showIndex() }, "\u2190 list (Esc)"),
      el("button", { type: "button", onclick: () => step(-1, false) }, "previous (\u2190)"),
      el("button", { type: "button", onclick: () => step(1, false) }, "next (\u2192)"),
      el("button", { type: "button", onclick: () => step(1, true) }, "next wrong (n)"),
      el("span", { class: "title", id: "case-key" }, IDX.keys[i]),
      el("span", {}, IDX.lesion[i] + ", " + IDX.path[i]),
      el("span", { id: "case-pos" }, pos >= 0 ? "case " + (pos + 1) + " of " + filtered.length + " shown"
                                              : "not in the filtered list"));
    const body = [];
    const head = el("div", { class: "columns" + (two ? " two" : "") }, runs.map((r) => {
      const d = details[r][IDX.keys[i]];
      const c = codes(r, i);
      const stages = c === null ? "not in this run" : STAGES.map((s, k) => "S" + (k + 1) + " " +
        ({ "1": "right", "0": "wrong", "?": "missing", "-": "not asked" }[c[k]])).join(", ");
      return el("div", { class: "case-summary" },
        el("div", { class: "col-head" }, (r === state.a ? "A: " : "B: ") + IDX.runs[r].label),
        el("div", {}, stages + (c === null ? "" : "; depth " + res(r).depth[i])),
        d && d.unfinished ? el("div", { class: "rq unfinished" }, unfinishedText(d.unfinished)) : null,
        errorClassText(r, i) ? el("div", { class: "error-classes" }, errorClassText(r, i)) : null,
        el("div", { class: "msg system" }, el("span", { class: "role" }, "System prompt"),
          IDX.runs[r].system_prompt || "(text not recorded; sha256 " +
            String((IDX.runs[r].manifest || {}).system_prompt_sha256 || "n/a") + ")"));
    }));
    body.push(head);
    const turnLists = runs.map((r) => (details[r][IDX.keys[i]] || { turns: [] }).turns);
    const byName = turnLists.map((ts) => Object.fromEntries(ts.map((t) => [t.name, t])));
    const names = [];
    for (const ts of turnLists) for (const t of ts) if (!names.includes(t.name)) names.push(t.name);
    names.forEach((name, j) => {
      const stage = (turnLists.map((ts, x) => byName[x][name]).find((t) => t) || {}).stage;
      body.push(el("div", { class: "turn", "data-turn": name },
        el("h3", {}, "Turn " + (j + 1) + ": " + name + (stage ? " (stage " + stage + ", " + STAGES[stage - 1] + ")" : "")),
        el("div", { class: "columns" + (two ? " two" : "") },
          runs.map((r, x) => turnCell(r, byName[x][name], byName[x],
                                      Boolean((details[r][IDX.keys[i]] || {}).unfinished))))));
    });
    $("case-body").replaceChildren(...body);
  }

  // Each case page is a history entry (#case=<key_id>), so the browser's Back and Forward
  // buttons move between the list and the cases seen.
  function openCase(i, fromHistory) {
    current = i;
    if (!fromHistory) {
      history.pushState(null, "", "#case=" + encodeURIComponent(IDX.keys[i]));
    }
    $("index-view").hidden = true;
    $("case-view").hidden = false;
    $("case-body").replaceChildren(el("div", { class: "loading" }, "loading ..."));
    const runs = [state.a, state.b].filter((r) => r >= 0);
    Promise.all(runs.map((r) => loadCase(r, i))).then(() => {
      if (current === i) { renderCase(i); window.scrollTo(0, 0); }
    }, showError);
  }

  function showIndex(fromHistory) {
    current = -1;
    if (fromHistory !== true) history.pushState(null, "", location.pathname + location.search);
    $("case-view").hidden = true;
    $("index-view").hidden = false;
  }

  function step(dir, wrongOnly) {
    if (!filtered.length) return;
    let pos = filtered.indexOf(current);
    for (let n = 0; n < filtered.length; n++) {
      pos = pos < 0 ? (dir > 0 ? 0 : filtered.length - 1) : pos + dir;
      if (pos < 0 || pos >= filtered.length) return;
      const i = filtered[pos];
      if (!wrongOnly || isWrong(state.a, i)) { openCase(i); return; }
    }
  }

  function zoom(url, name) {
    const box = $("zoom");
    box.replaceChildren(el("img", { src: url, alt: name }), el("div", {}, name + " (click or Esc to close)"));
    box.hidden = false;
  }

  function showError(err) {
    $("counts").textContent = String(err && err.message ? err.message : err);
    const body = $("case-body");
    if (body) body.replaceChildren(el("div", { class: "rq" }, String(err && err.message ? err.message : err)));
  }

  function route() {
    const m = /^#case=(.+)$/.exec(location.hash);
    const key = m ? decodeURIComponent(m[1]) : null;
    if (key !== null && keyIndex.has(key)) openCase(keyIndex.get(key), true);
    else if (!$("case-view").hidden) showIndex(true);
  }

  // ---- wiring ------------------------------------------------------------------------------
  function onFilter(id, field) {
    $(id).addEventListener("change", (ev) => { state[field] = ev.target.value; state.page = 0; refilter(); });
  }
  function init() {
    fillFilters();
    onFilter("f-lesion", "lesion"); onFilter("f-path", "path"); onFilter("f-depth", "depth");
    onFilter("f-correct", "correct"); onFilter("f-status", "status"); onFilter("f-pair", "pair");
    onFilter("f-pair-stage", "pairStage"); onFilter("f-error", "error");
    $("f-text").addEventListener("input", (ev) => { state.text = ev.target.value; state.page = 0; refilter(); });
    $("f-reset").addEventListener("click", () => {
      Object.assign(state, { lesion: "", path: "", depth: "", correct: "", status: "", pair: "",
                             pairStage: "all", text: "", page: 0, error: "" });
      fillFilters(); refilter();
    });
    $("run-a").addEventListener("change", (ev) => { state.a = +ev.target.value; fillFilters(); renderMeta(); refilter(); });
    $("run-b").addEventListener("change", (ev) => {
      state.b = +ev.target.value;
      if (state.b < 0) state.pair = "";
      fillFilters(); renderMeta(); refilter();
    });
    document.addEventListener("keydown", (ev) => {
      if ($("case-view").hidden || ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT") return;
      if (!$("zoom").hidden) { if (ev.key === "Escape") $("zoom").hidden = true; return; }
      if (ev.key === "Escape") showIndex();
      else if (ev.key === "ArrowRight") step(1, false);
      else if (ev.key === "ArrowLeft") step(-1, false);
      else if (ev.key === "n") step(1, true);
      else if (ev.key === "p") step(-1, true);
    });
    $("zoom").addEventListener("click", () => { $("zoom").hidden = true; });
    renderMeta();
    applyFilters();
    window.addEventListener("popstate", route);
    route();
    document.body.setAttribute("data-ready", "1");
  }
  init();
})();
