// crcr HUD: renders /hud/, /hud/commit/<sha>, /hud/pr/<n> and /hud/repo/<owner>/<repo> from the JSON
// documents the relay's reporter keeps under /hud/data/. No build step, no dependencies.
// Everything a downstream reported (job names, URLs, counts) is untrusted: it is only ever set as text,
// and only http(s) URLs become links.
"use strict";

const STATES = {
  success: { sym: "✓", word: "success" },
  failure: { sym: "✗", word: "failure" },
  timed_out: { sym: "◔", word: "timed out" },
  cancelled: { sym: "⊘", word: "cancelled" },
  action_required: { sym: "!", word: "action required" },
  running: { sym: "●", word: "running" },
  neutral: { sym: "○", word: "neutral" },
  skipped: { sym: "↷", word: "skipped" },
  none: { sym: "–", word: "no result" },
};
const VERDICTS = {
  promote: "PROMOTE — meets every criterion of the next level",
  keep: "KEEP — stays at its level",
  demote: "DEMOTE — below its level's thresholds",
  insufficient_data: "INSUFFICIENT DATA — too few finished jobs to judge",
};
const REFRESH_MS = 30000;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function safeUrl(url) {
  try {
    const parsed = new URL(url);
    return parsed.protocol === "https:" || parsed.protocol === "http:" ? parsed.href : null;
  } catch (_) {
    return null;
  }
}

function link(href, ...children) {
  return href ? el("a", { href }, ...children) : el("span", {}, ...children);
}

function stateBadge(state, extra, href) {
  const known = STATES[state] ? state : "failure";
  const s = STATES[known];
  const label = el("span", { class: "word" }, s.word);
  const badge = el(href ? "a" : "span", { class: `state s-${known}`, href, "data-state": known },
    el("span", { class: "sym", "aria-hidden": "true" }, s.sym), label,
    extra ? el("span", { class: "count" }, extra) : null);
  return badge;
}

function levelBadge(level) {
  return level ? el("span", { class: `level L${level}`, title: `participation level L${level}` }, `L${level}`) : null;
}

function shortSha(sha) {
  return String(sha || "").slice(0, 10);
}

function when(epochSeconds) {
  if (!epochSeconds) return el("span", {}, "–");
  const date = new Date(epochSeconds * 1000);
  const ago = Math.max(0, (Date.now() - date.getTime()) / 1000);
  let text;
  if (ago < 90) text = `${Math.round(ago)} s ago`;
  else if (ago < 5400) text = `${Math.round(ago / 60)} min ago`;
  else if (ago < 129600) text = `${Math.round(ago / 3600)} h ago`;
  else text = date.toISOString().slice(0, 10);
  return el("time", { datetime: date.toISOString(), title: date.toISOString().replace("T", " ").slice(0, 19) + " UTC" }, text);
}

function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return "–";
  const s = Math.round(seconds);
  if (s < 120) return `${s} s`;
  const parts = s < 7200 ? [[Math.floor(s / 60), "min"], [s % 60, "s"]] : [[Math.floor(s / 3600), "h"], [Math.round((s % 3600) / 60), "min"]];
  return parts.filter(([n], i) => i === 0 || n).map(([n, unit]) => `${n} ${unit}`).join(" ");
}

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many || `${one}s`}`;
}

function percent(value) {
  return value === null || value === undefined ? "–" : `${(value * 100).toFixed(1)}%`;
}

function tests(t) {
  if (!t) return "–";
  const parts = [];
  if (typeof t.passed === "number") parts.push(`${t.passed} passed`);
  if (typeof t.failed === "number") parts.push(`${t.failed} failed`);
  if (typeof t.skipped === "number" && t.skipped) parts.push(`${t.skipped} skipped`);
  return parts.join(", ") || "–";
}

function repoPath(repo) {
  return `/hud/repo/${repo}`;
}

function repoDoc(repo) {
  return `/hud/data/repo/${repo.toLowerCase()}.json`;
}

function repoHeader(repo, level) {
  const [owner, name] = repo.split("/");
  return el("th", { class: "repo", scope: "col" },
    el("a", { href: repoPath(repo) }, el("span", { class: "owner" }, `${owner}/`), name), " ", levelBadge(level));
}

function cellFor(cell, href) {
  if (!cell) return el("span", { class: "nothing", title: "no result recorded", "data-state": "none" }, "–");
  const counts = cell.jobs > 1 ? ` ${cell.failed ? cell.failed : cell.passed}/${cell.jobs}` : null;
  return stateBadge(cell.state, counts, href);
}

function commitRow(commit, repos, options) {
  const pr = commit.pr
    ? el("a", { href: `/hud/pr/${commit.pr}` }, `#${commit.pr}`)
    : el("span", { class: "mono" }, commit.event_type === "nightly" ? "nightly" : "push");
  const cells = repos.map(({ repo }) => {
    const cell = commit.repos[repo];
    return el("td", { class: "cellwrap", "data-repo": repo },
      cellFor(cell, cell ? `/hud/commit/${commit.sha}#${encodeURIComponent(repo)}` : null));
  });
  return el("tr", { "data-sha": commit.sha },
    el("td", { class: "when" }, when(commit.first_seen)),
    el("td", {}, el("a", { class: "mono", href: `/hud/commit/${commit.sha}` }, shortSha(commit.sha))),
    options && options.noPr ? null : el("td", {}, pr),
    cells);
}

function commitsGrid(commits, repos, options) {
  if (!commits.length) return el("p", { class: "empty" }, "No downstream results recorded yet.");
  return el("div", { class: "scroll" }, el("table", { class: "grid" },
    el("thead", {}, el("tr", {},
      el("th", { scope: "col" }, "First dispatched"),
      el("th", { scope: "col" }, "Upstream commit"),
      options && options.noPr ? null : el("th", { scope: "col" }, "PR"),
      repos.map(({ repo, level }) => repoHeader(repo, level)))),
    el("tbody", {}, commits.map((c) => commitRow(c, repos, options)))));
}

function reposOf(commits) {
  const levels = new Map();
  for (const c of commits) {
    for (const [repo, cell] of Object.entries(c.repos || {})) levels.set(repo, Math.max(levels.get(repo) || 0, cell.level));
  }
  return [...levels.entries()].map(([repo, level]) => ({ repo, level })).sort((a, b) => a.repo.localeCompare(b.repo));
}

function jobsTable(entries, options) {
  const showCommit = options && options.showCommit;
  const showRepo = !showCommit && !(options && options.grouped);
  const rows = entries.map((e) => {
    const run = safeUrl(e.url);
    return el("tr", { "data-state": e.state },
      showCommit ? el("td", { class: "when" }, when(e.dispatched_at)) : null,
      showCommit ? el("td", {}, el("a", { class: "mono", href: `/hud/commit/${e.head_sha}` }, shortSha(e.head_sha)),
        e.pr ? [" ", el("a", { href: `/hud/pr/${e.pr}` }, `#${e.pr}`)] : null) : null,
      showRepo ? el("td", {}, el("a", { href: repoPath(e.repo) }, e.repo), " ", levelBadge(e.level)) : null,
      el("td", {}, e.workflow || "–"),
      el("td", {}, e.job),
      el("td", { class: "num" }, e.attempt ? String(e.attempt) : "–"),
      el("td", {}, stateBadge(e.state, null, null)),
      el("td", {}, tests(e.tests)),
      el("td", { class: "num" }, duration(e.queue_s)),
      el("td", { class: "num" }, duration(e.run_s)),
      el("td", {}, run ? el("a", { href: run, rel: "noopener noreferrer" }, "downstream run ↗") : "–"));
  });
  return el("div", { class: "scroll" }, el("table", { class: "jobs" },
    el("thead", {}, el("tr", {},
      showCommit ? el("th", {}, "Dispatched") : null,
      showCommit ? el("th", {}, "Upstream commit") : null,
      showRepo ? el("th", {}, "Downstream repository") : null,
      el("th", {}, "Workflow"), el("th", {}, "Job"), el("th", { class: "num" }, "Attempt"),
      el("th", {}, "Result"), el("th", {}, "Tests"), el("th", { class: "num" }, "Queue"),
      el("th", { class: "num" }, "Run"), el("th", {}, "Link"))),
    el("tbody", {}, rows)));
}

function severity(state) {
  const order = ["failure", "timed_out", "cancelled", "action_required", "running", "success", "neutral", "skipped"];
  const i = order.indexOf(state);
  return i < 0 ? 0 : i;
}

// ---------------------------------------------------------------- pages

function renderOverview(doc) {
  const commits = doc.commits || [];
  const repos = doc.repos && doc.repos.length ? doc.repos : reposOf(commits);
  return [
    el("h1", {}, "Recent upstream commits"),
    el("p", { class: "meta" }, `${plural(commits.length, "commit")} × ${plural(repos.length, "downstream repository", "downstream repositories")}. `,
      "Each cell is the worst result among that repository's jobs on the commit (newest attempt of each)."),
    commitsGrid(commits, repos),
  ];
}

function renderCommit(doc) {
  const entries = Object.values(doc.jobs || {});
  const byRepo = new Map();
  for (const e of entries) {
    if (!byRepo.has(e.repo)) byRepo.set(e.repo, []);
    byRepo.get(e.repo).push(e);
  }
  const upstream = doc.upstream || "";
  const sections = [...byRepo.entries()].sort((a, b) => a[0].localeCompare(b[0])).map(([repo, jobs]) => {
    jobs.sort((a, b) => severity(a.state) - severity(b.state) || a.job.localeCompare(b.job) || b.attempt - a.attempt);
    return el("section", { id: repo, "data-repo": repo },
      el("h2", {}, el("a", { href: repoPath(repo) }, repo), " ", levelBadge(jobs[0].level)),
      jobsTable(jobs, { grouped: true }));
  });
  const failed = entries.filter((e) => ["failure", "timed_out"].includes(e.state)).length;
  return [
    el("h1", {}, "Upstream commit ", el("span", { class: "mono" }, doc.sha)),
    el("p", { class: "meta" },
      link(safeUrl(`https://github.com/${upstream}/commit/${doc.sha}`), `${upstream} on GitHub ↗`),
      doc.pr ? el("a", { href: `/hud/pr/${doc.pr}` }, `PR #${doc.pr}`) : el("span", {}, doc.event_type || ""),
      el("span", {}, `${plural(entries.length, "job attempt")} in ${plural(byRepo.size, "repository", "repositories")}, ${failed} failed or timed out`)),
    sections.length ? sections : el("p", { class: "empty" }, "No downstream results recorded for this commit yet."),
  ];
}

async function renderPr(doc) {
  const commits = doc.commits || [];
  const repos = reposOf(commits);
  const upstream = doc.upstream || "";
  const out = [
    el("h1", {}, `Pull request #${doc.pr}`),
    el("p", { class: "meta" },
      link(safeUrl(`https://github.com/${upstream}/pull/${doc.pr}`), `${upstream}#${doc.pr} on GitHub ↗`),
      el("span", {}, `${plural(commits.length, "commit")} with downstream results`)),
    el("h2", {}, "Commits of this PR, newest first"),
    commitsGrid(commits, repos, { noPr: true }),
  ];
  if (commits.length) {
    const head = await fetchDoc(`/hud/data/commit/${commits[0].sha}.json`);
    if (head) {
      out.push(el("h2", {}, "Jobs on the newest commit ", el("a", { class: "mono", href: `/hud/commit/${head.sha}` }, shortSha(head.sha))));
      const entries = Object.values(head.jobs || {});
      entries.sort((a, b) => severity(a.state) - severity(b.state) || a.repo.localeCompare(b.repo) || a.job.localeCompare(b.job));
      out.push(jobsTable(entries));
    }
  }
  return out;
}

function figureRow(label, measured, target, ok) {
  return el("tr", {},
    el("th", { scope: "row" }, label),
    el("td", { class: "num" }, measured),
    el("td", { class: "num" }, target || ""),
    el("td", {}, ok === null || ok === undefined ? "" : el("span", { class: ok ? "ok" : "bad" }, ok ? "✓ met" : "✗ not met")));
}

function renderHealth(h) {
  if (!h) return el("p", { class: "empty" }, "No health figures yet.");
  const t = h.thresholds || {};
  const verdict = h.verdict || "insufficient_data";
  const rows = [
    figureRow("Finished jobs", String(h.jobs ?? "–"), h.min_jobs ? `≥ ${h.min_jobs} to judge` : "", null),
    figureRow("Pass rate", percent(h.pass_rate), t.pass_rate !== undefined ? `≥ ${percent(t.pass_rate)}` : "",
      h.pass_rate !== null && t.pass_rate !== undefined ? h.pass_rate >= t.pass_rate : null),
    figureRow("Timeout rate", percent(h.timeout_rate), t.timeout_rate !== undefined ? `< ${percent(t.timeout_rate)}` : "",
      h.timeout_rate !== null && t.timeout_rate !== undefined ? h.timeout_rate < t.timeout_rate : null),
    figureRow("Average queue", duration(h.avg_queue_s), t.avg_queue_s !== undefined ? `< ${duration(t.avg_queue_s)}` : "",
      h.avg_queue_s !== null && h.avg_queue_s !== undefined && t.avg_queue_s !== undefined ? h.avg_queue_s < t.avg_queue_s : null),
    figureRow("Queue P50 / P90", `${duration(h.queue_p50_s)} / ${duration(h.queue_p90_s)}`, "", null),
    figureRow("Execution P50 / P90", `${duration(h.execution_p50_s)} / ${duration(h.execution_p90_s)}`, "", null),
    figureRow("End to end P50", duration(h.p50_end_to_end_s), t.p50_end_to_end_s !== undefined ? `< ${duration(t.p50_end_to_end_s)}` : "",
      h.p50_end_to_end_s !== null && h.p50_end_to_end_s !== undefined && t.p50_end_to_end_s !== undefined ? h.p50_end_to_end_s < t.p50_end_to_end_s : null),
    figureRow("Longest execution", duration(h.max_execution_s), t.max_execution_s !== undefined ? `< ${duration(t.max_execution_s)}` : "",
      h.max_execution_s !== null && h.max_execution_s !== undefined && t.max_execution_s !== undefined ? h.max_execution_s < t.max_execution_s : null),
  ];
  return el("div", { class: "health" },
    el("div", { class: `verdict v-${verdict}`, "data-verdict": verdict },
      el("strong", {}, VERDICTS[verdict] || verdict),
      el("span", { class: "why" }, `over the last ${h.window_days || "?"} days, as of `, when(h.computed_at))),
    el("ul", { class: "reasons" }, (h.reasons || []).map((r) => el("li", {}, r))),
    el("table", { class: "figures" },
      el("thead", {}, el("tr", {}, el("th", {}, "Figure"), el("th", { class: "num" }, "Measured"),
        el("th", { class: "num" }, "Threshold"), el("th", {}, ""))),
      el("tbody", {}, rows)));
}

function renderRepo(doc, repo) {
  const history = doc.history || [];
  const finished = history.filter((e) => e.state !== "running");
  const passed = finished.filter((e) => e.state === "success").length;
  return [
    el("h1", {}, doc.repo || repo, " ", levelBadge(doc.level)),
    el("p", { class: "meta" }, link(safeUrl(`https://github.com/${doc.repo || repo}`), "repository on GitHub ↗"),
      el("span", {}, `participation level L${doc.level || "?"}`)),
    el("h2", {}, "Health"),
    renderHealth(doc.health),
    el("h2", {}, `Recent job attempts (${history.length}; ${passed} of ${finished.length} finished passed)`),
    history.length ? jobsTable(history, { showCommit: true }) : el("p", { class: "empty" }, "No job attempts recorded yet."),
  ];
}

// ---------------------------------------------------------------- plumbing

async function fetchDoc(url) {
  const response = await fetch(url, { cache: "no-cache", credentials: "same-origin" });
  if (response.status === 404) return null;
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

function route(path) {
  let m;
  if ((m = path.match(/^\/hud\/commit\/([0-9a-f]{40})$/))) return { kind: "commit", sha: m[1] };
  if ((m = path.match(/^\/hud\/pr\/([1-9][0-9]*)$/))) return { kind: "pr", pr: m[1] };
  if ((m = path.match(/^\/hud\/repo\/([A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)$/))) return { kind: "repo", repo: m[1] };
  return { kind: "overview" };
}

function crumbs(r) {
  const parts = [el("a", { href: "/hud/" }, "overview")];
  if (r.kind === "commit") parts.push("› commit ", el("span", { class: "mono" }, shortSha(r.sha)));
  if (r.kind === "pr") parts.push(`› PR #${r.pr}`);
  if (r.kind === "repo") parts.push(`› ${r.repo}`);
  return parts;
}

function legend() {
  return [el("span", {}, "Legend:"), ...Object.keys(STATES).map((s) => stateBadge(s, null, null)),
    el("span", {}, "· L3/L4: levels that get upstream check runs (L4 blocking)")];
}

let lastStamp = null;

async function render() {
  const r = route(location.pathname);
  const main = document.getElementById("main");
  let doc;
  let content;
  try {
    if (r.kind === "overview") doc = await fetchDoc("/hud/data/index.json");
    if (r.kind === "commit") doc = await fetchDoc(`/hud/data/commit/${r.sha}.json`);
    if (r.kind === "pr") doc = await fetchDoc(`/hud/data/pr/${r.pr}.json`);
    if (r.kind === "repo") doc = await fetchDoc(repoDoc(r.repo));
  } catch (err) {
    main.replaceChildren(el("p", { class: "error" }, `Could not load the data: ${err.message}`));
    document.body.dataset.ready = "true";
    return;
  }
  const stamp = doc ? doc.updated_at : null;
  if (lastStamp !== null && stamp === lastStamp) return; // nothing new: keep the page (and the scroll) as is
  lastStamp = stamp;
  if (!doc) {
    content = el("p", { class: "empty" }, r.kind === "overview"
      ? "No downstream results recorded yet." : "Nothing recorded here yet (or it is older than the relay keeps).");
  } else if (r.kind === "overview") content = renderOverview(doc);
  else if (r.kind === "commit") content = renderCommit(doc);
  else if (r.kind === "pr") content = await renderPr(doc);
  else content = renderRepo(doc, r.repo);
  main.replaceChildren(...[content].flat(Infinity));
  document.getElementById("crumbs").replaceChildren(...crumbs(r));
  document.getElementById("updated").replaceChildren(stamp ? el("span", {}, "data updated ", when(stamp)) : "");
  document.title = `crcr HUD · ${r.kind === "overview" ? "overview" : r.kind === "commit" ? shortSha(r.sha) : r.kind === "pr" ? `PR #${r.pr}` : r.repo}`;
  if (location.hash) {
    const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (target) target.scrollIntoView();
  }
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("legend").replaceChildren(...legend());
  render();
  setInterval(render, REFRESH_MS);
});
