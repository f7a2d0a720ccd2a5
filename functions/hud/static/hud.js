// crcr HUD: renders /hud/ (pull requests), /hud/trunk, /hud/nightly, /hud/commit/<sha>, /hud/pr/<n> and
// /hud/repo/<owner>/<repo> from the JSON documents the relay keeps under /hud/data/. No build step, no
// dependencies. Everything a downstream reported (job names, test names, messages, URLs) is untrusted: it is only
// ever set as text, and only http(s) URLs become links.
"use strict";

// Each state in colour, symbol and word; `says` is what a screen reader hears.
const STATES = {
  success: { sym: "✓", word: "success" },
  failure: { sym: "✗", word: "failure" },
  timed_out: { sym: "◔", word: "timed out" },
  not_started: { sym: "⊗", word: "no run", says: "GitHub started no run for the dispatch" },
  cancelled: { sym: "⊘", word: "cancelled" },
  action_required: { sym: "!", word: "action required" },
  running: { sym: "●", word: "running" },
  neutral: { sym: "○", word: "neutral" },
  skipped: { sym: "↷", word: "skipped" },
  pending: { sym: "◷", word: "not started", says: "dispatched, no job started yet" },
  dispatched: { sym: "↗", word: "dispatched", says: "dispatched; L1 records no results" },
  held: { sym: "‖", word: "held", says: "held until a maintainer adds a ciflow label" },
  superseded: { sym: "↦", word: "superseded", says: "superseded by a newer commit of the PR" },
  not_targeted: { sym: "·", word: "not targeted", says: "not targeted" },
  none: { sym: "–", word: "no record", says: "nothing recorded" },
};
const LEGEND = ["success", "failure", "timed_out", "not_started", "cancelled", "running", "pending", "dispatched", "held", "skipped",
  "superseded", "not_targeted", "none"];
const REASONS = {
  no_matching_files: "no matching files",
  nightly_only: "nightly only",
  event_disabled: "event not enabled",
  branch_filtered: "branch not built",
  ciflow_not_wanted: "ciflow name not wanted",
  draft: "draft PR",
  untrusted_author: "author not trusted yet",
  closed_on_buildkite: "closed PR (Buildkite)",
  not_a_branch: "not a branch",
  l1: "L1: no results recorded",
};
const VERDICT_WORDS = {
  new: "new",
  "pre-existing": "pre-existing",
  infra: "infra",
  flaky: "flaky",
  "no baseline": "no baseline",
  "broken trunk": "broken trunk",
  known: "known upstream",
};
const VERDICT_MEANING = {
  new: "it passed on the base commit: this change broke it",
  "pre-existing": "it failed on the base commit too",
  infra: "the downstream's infrastructure failed, or the job timed out; retried once",
  flaky: "it failed, then passed on a retry of the same commit",
  "no baseline": "no result of this job on the base commit or before it to compare with",
  "broken trunk": "the job is broken on the default branch at the base commit (an open regression): not this change",
  known: "every failing test is one PyTorch has disabled (a DISABLED issue): a failure already known upstream",
};
const VERDICT_ORDER = ["new", "infra", "flaky", "broken trunk", "known", "pre-existing", "no baseline"];
const HEALTH_VERDICTS = {
  promote: "PROMOTE — meets every criterion of the next level",
  keep: "KEEP — stays at its level",
  demote: "DEMOTE — below its level's thresholds",
  insufficient_data: "INSUFFICIENT DATA — too few finished PR jobs to judge",
};
const DEDUPE = {
  "run-name": ["ok", "A repeated dispatch cannot start a second run: the workflow's run-name carries the dispatch id."],
  none: ["bad", "Runs can be started twice: the workflow's run-name does not carry the dispatch id, so a dispatch whose answer was lost may be sent again and start a second run. To fix it, end the workflow's run-name with ${{ github.event.client_payload.dispatch_id }} (the example workflow and crcr onboard's have it)."],
  buildkite: ["ok", "A repeated dispatch cannot start a second build: Buildkite builds are found again by their meta-data."],
};
const FAILED = ["failure", "timed_out", "not_started", "cancelled", "action_required"];
const FINISHED = ["success", "failure", "timed_out", "not_started", "cancelled", "action_required", "neutral", "skipped"];
const REFRESH_MS = 30000;

// ---------------------------------------------------------------- building blocks

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

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children.flat(Infinity)) if (child) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
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

function external(href, text) {
  const url = safeUrl(href);
  return url ? el("a", { href: url, rel: "noopener noreferrer" }, text) : null;
}

function stateOf(state) {
  return STATES[state] ? state : "failure";
}

function stateBadge(state, extra, href, says) {
  const known = stateOf(state);
  const s = STATES[known];
  const spoken = says || [s.says || s.word, extra].filter(Boolean).join(", ");
  return el(href ? "a" : "span", { class: `state s-${known}`, href, "data-state": known, "aria-label": spoken },
    el("span", { class: "sym", "aria-hidden": "true" }, s.sym), el("span", { class: "word" }, s.word),
    extra ? el("span", { class: "count" }, extra) : null);
}

function verdictTag(verdict) {
  if (!verdict) return null;
  const word = VERDICT_WORDS[verdict] || verdict;
  return el("span", { class: `verdict-tag vt-${word.replace(/\W+/g, "-")}`, "data-verdict": verdict,
    title: VERDICT_MEANING[verdict] || "" }, word);
}

function levelBadge(level) {
  return level ? el("span", { class: `level L${level}`, title: `participation level L${level}` }, `L${level}`) : null;
}

function shortSha(sha) {
  return String(sha || "").slice(0, 10);
}

// How long ago, coarsely (a waiting dispatch's age): seconds, then minutes, then hours and minutes.
function ago(epochSeconds) {
  const s = Math.max(0, Date.now() / 1000 - epochSeconds);
  if (s < 120) return `${Math.round(s)} s`;
  if (s < 7200) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function testDuration(seconds) {
  return seconds < 10 ? `${Number(seconds.toFixed(2))} s` : duration(seconds);
}

function when(epochSeconds) {
  if (!epochSeconds) return el("span", {}, "–");
  const date = new Date(epochSeconds * 1000);
  const since = Math.max(0, (Date.now() - date.getTime()) / 1000);
  let text;
  if (since < 90) text = `${Math.round(since)} s ago`;
  else if (since < 5400) text = `${Math.round(since / 60)} min ago`;
  else if (since < 129600) text = `${Math.round(since / 3600)} h ago`;
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

function reasonText(reason) {
  return REASONS[reason] || String(reason || "").replace(/_/g, " ");
}

function repoPath(repo) {
  return `/hud/repo/${repo}`;
}

function repoDoc(repo) {
  return `/hud/data/repo/${repo.toLowerCase()}.json`;
}

function sep() {
  return el("span", { class: "sep", "aria-hidden": "true" }, " · ");
}

function joinMeta(parts) {
  const out = [];
  for (const part of parts.filter(Boolean)) {
    if (out.length) out.push(sep());
    out.push(part);
  }
  return out;
}

function prState(state) {
  return state ? el("span", { class: `pr-state pr-${state}`, "data-pr-state": state }, state) : null;
}

// ---------------------------------------------------------------- the grid

function repoHeader(info) {
  const [owner, name] = info.repo.split("/");
  return el("th", { class: "repo", scope: "col", "data-repo": info.repo },
    el("a", { href: repoPath(info.repo) }, el("span", { class: "owner" }, `${owner}/`), name), " ", levelBadge(info.level),
    info.nightly_only ? el("span", { class: "flag", title: "takes part through scheduled runs only" }, "nightly only") : null,
    info.refused ? el("a", { class: "flag flag-bad", href: repoPath(info.repo) + "#refused" }, `⚠ ${plural(info.refused, "report")} refused`) : null);
}

function cellExtra(cell) {
  const state = stateOf(cell.state);
  if (state === "pending" && cell.since) return ago(cell.since);
  if (["skipped", "not_targeted", "held", "dispatched"].includes(state) && cell.reason) return reasonText(cell.reason);
  if (cell.jobs > 1) return `${FAILED.includes(state) ? cell.failed : state === "running" ? cell.running : cell.passed}/${cell.jobs}`;
  return null;
}

function cellFor(repo, cell, href) {
  if (!cell) {
    return el("span", { class: "state s-none nothing", "data-state": "none", "aria-label": `${repo}: nothing recorded` },
      el("span", { class: "sym", "aria-hidden": "true" }, "–"), el("span", { class: "word" }, "no record"));
  }
  const extra = cellExtra(cell);
  const verdicts = (cell.verdicts || []).slice().sort((a, b) => VERDICT_ORDER.indexOf(a) - VERDICT_ORDER.indexOf(b));
  const s = STATES[stateOf(cell.state)];
  const says = [`${repo}: ${s.says || s.word}`, extra, verdicts.length ? `${verdicts[0]} failure` : null].filter(Boolean).join(", ");
  const badge = stateBadge(cell.state, extra, href, says);
  if (verdicts.length) badge.append(verdictTag(verdicts[0]));
  return badge;
}

function commitCell(commit) {
  const title = commit.title ? el("span", { class: "title" }, commit.title) : null;
  const who = commit.author ? el("span", { class: "author" }, commit.author) : null;
  return el("td", { class: "commit" },
    el("a", { class: "mono", href: `/hud/commit/${commit.sha}` }, shortSha(commit.sha)), " ", title,
    el("div", { class: "byline" }, joinMeta([who, when(commit.at || commit.first_seen)])));
}

function prCell(commit) {
  if (commit.pr) {
    return el("td", { class: "prcol" }, el("a", { href: `/hud/pr/${commit.pr}` }, `#${commit.pr}`), " ",
      prState(commit.pr_state), commit.ciflow ? el("span", { class: "flag" }, `ciflow/${commit.ciflow}`) : null);
  }
  return el("td", { class: "prcol" }, el("span", { class: "mono" }, commit.event_type === "nightly" ? "nightly" : "push"));
}

function commitRow(commit, repos, options) {
  const cells = repos.map(({ repo }) => {
    const cell = (commit.repos || {})[repo];
    return el("td", { class: "cellwrap", "data-repo": repo, "data-label": repo.split("/")[1] || repo },
      cellFor(repo, cell, `/hud/commit/${commit.sha}#${encodeURIComponent(repo)}`),
      brokenSince(options && options.broken, repo, commit.sha));
  });
  return el("tr", { "data-sha": commit.sha, class: commit.superseded_by ? "superseded" : null },
    commitCell(commit),
    options && options.noPr ? null : prCell(commit),
    cells);
}

function commitsGrid(commits, repos, options) {
  if (!commits.length) return el("p", { class: "empty" }, (options && options.empty) || "No downstream results recorded yet.");
  return el("div", { class: "gridwrap" }, el("table", { class: "grid" },
    el("caption", { class: "sr-only" }, "Upstream commits and each downstream repository's result"),
    el("thead", {}, el("tr", {},
      el("th", { scope: "col" }, "Upstream commit"),
      options && options.noPr ? null : el("th", { scope: "col" }, "PR"),
      repos.map(repoHeader))),
    el("tbody", {}, commits.map((c) => commitRow(c, repos, options)))));
}

// ---------------------------------------------------------------- regressions on the default branch

// Regressions by the cell of their first failing commit: `${repo}|${sha}` (repository in lower case). The nightly
// view shows a day's newest run only, so there an open regression also marks the cell of its newest failure.
function brokenCells(regs, newestToo) {
  const cells = new Map();
  for (const r of (regs && regs.regressions) || []) {
    const shas = newestToo && r.state === "open" ? new Set([r.first_fail, r.last_fail]) : [r.first_fail];
    for (const sha of shas) {
      const key = `${String(r.repo).toLowerCase()}|${sha}`;
      cells.set(key, [...(cells.get(key) || []), r]);
    }
  }
  return cells;
}

function rangeText(r) {
  const n = (r.blamelist || []).length;
  return `${shortSha(r.last_pass)}..${shortSha(r.first_fail)}, ${plural(n, "commit")}`;
}

// The first failing cell of a regression: "broken since" this commit, with the range that could have caused it.
function brokenSince(cells, repo, sha) {
  const found = cells ? cells.get(`${repo.toLowerCase()}|${sha}`) : null;
  if (!found) return null;
  return found.map((r) => el("a", { class: `broken ${r.state}`, href: `${repoPath(repo)}#regressions`, "data-regression": r.first_fail,
    title: `${r.workflow_name} / ${r.job_name}: last passed on ${shortSha(r.last_pass)}, failing from ${shortSha(r.first_fail)}` },
    r.state === "open" ? "broken since" : "was broken since", " ", el("span", { class: "mono" }, rangeText(r)),
    el("span", { class: "sr-only" }, ` (${r.workflow_name} / ${r.job_name})`)));
}

function blamedLine(b, upstream) {
  const pr = b.pr && upstream ? external(`https://github.com/${upstream}/pull/${b.pr}`, `#${b.pr}`) : b.pr ? `#${b.pr}` : null;
  return el("li", { class: b.suspect ? "suspect" : "unlikely" },
    el("a", { class: "mono", href: `/hud/commit/${b.sha}` }, shortSha(b.sha)), " ", pr, " ",
    b.title ? el("span", { class: "title" }, b.title) : null,
    b.author ? el("span", { class: "author" }, ` · ${b.author}`) : null,
    b.suspect ? null : el("span", { class: "muted" }, " · outside the job's path filter"));
}

function renderRegressions(regs, repo) {
  const mine = ((regs && regs.regressions) || []).filter((r) => String(r.repo).toLowerCase() === repo.toLowerCase())
    .sort((a, b) => (a.state === b.state ? b.opened_at - a.opened_at : a.state === "open" ? -1 : 1));
  const out = [el("h2", { id: "regressions" }, `Regressions on the default branch (${mine.filter((r) => r.state === "open").length} open)`)];
  if (!mine.length) return [...out, el("p", { class: "empty" }, "None: no job of this repository went from passing to failing on a push or nightly run lately.")];
  return [...out, el("ul", { class: "regressions" }, mine.map((r) => el("li", { class: `regression ${r.state}`, "data-regression": r.first_fail },
    el("div", {}, el("strong", {}, `${r.workflow_name} / ${r.job_name}`), " ",
      el("span", { class: `rstate ${r.state}` }, r.state === "open" ? "OPEN — broken since" : "FIXED — was broken since"), " ",
      el("a", { class: "mono", href: `/hud/commit/${r.first_fail}` }, shortSha(r.first_fail))),
    el("div", { class: "meta" }, `Passed on `, el("a", { class: "mono", href: `/hud/commit/${r.last_pass}` }, shortSha(r.last_pass)),
      `, failed from `, el("a", { class: "mono", href: `/hud/commit/${r.first_fail}` }, shortSha(r.first_fail)),
      r.state === "open" ? `; still failing on ${shortSha(r.last_fail)}` : `; fixed between ${shortSha(r.last_fail)} and ${shortSha(r.fixed_by)}`,
      ` · opened `, when(r.opened_at)),
    el("div", {}, `Blamelist: ${plural((r.blamelist || []).length, "commit")}`,
      (r.blamelist || []).some((b) => !b.suspect) ? `, ${(r.blamelist || []).filter((b) => b.suspect).length} touching the job's paths` : ""),
    el("ul", { class: "blamelist" }, (r.blamelist || []).map((b) => blamedLine(b, regs.upstream))))))];
}

function reposOf(commits, known) {
  const byRepo = new Map((known || []).map((r) => [r.repo, r]));
  const levels = new Map();
  for (const c of commits) {
    for (const [repo, cell] of Object.entries(c.repos || {})) levels.set(repo, Math.max(levels.get(repo) || 0, cell.level || 0));
  }
  for (const [repo, level] of levels) if (!byRepo.has(repo)) byRepo.set(repo, { repo, level });
  return [...byRepo.values()].sort((a, b) => a.repo.toLowerCase().localeCompare(b.repo.toLowerCase()));
}

// ---------------------------------------------------------------- jobs and their failures

function latestAttempts(entries) {
  const latest = new Map();
  for (const e of entries) {
    const group = `${e.repo}|${e.delivery_id}|${e.workflow}|${e.job}`;
    const kept = latest.get(group);
    if (!kept || (e.attempt || 0) > (kept.attempt || 0)) latest.set(group, e);
  }
  return latest;
}

function severity(state) {
  const order = ["failure", "timed_out", "not_started", "cancelled", "action_required", "running", "success", "neutral",
    "skipped"];
  const i = order.indexOf(state);
  return i < 0 ? 0 : i;
}

// A known failure's issue, and who opened it when the relay searched the issues itself (a file names no one).
function knownIssue(url, author) {
  const issue = external(url, `#${String(url).split("/").pop()}`);
  return issue && author ? el("span", { class: "known-issue" }, issue, " by ", el("span", { class: "author" }, `@${author}`)) : issue;
}

function failureDetails(e, context) {
  const parts = [];
  if (e.verdict) {
    const base = context && context.base_sha;
    const compared = ["new", "pre-existing"].includes(e.verdict);
    parts.push(el("p", { class: "why" }, el("strong", {}, "Verdict: "), verdictTag(e.verdict), " ", VERDICT_MEANING[e.verdict] || "",
      compared && e.verdict_baseline
        ? [" — judged against this job's result on ",
          el("a", { class: "mono baseline", href: `/hud/commit/${e.verdict_baseline}` }, shortSha(e.verdict_baseline)),
          base && base !== e.verdict_baseline ? [" (the latest at or before the PR's base ", shortSha(base), ")"] : null, "."]
        : compared && base
          ? [" — judged against this job's latest push or nightly result at or before the PR's base ",
            el("a", { class: "mono", href: `/hud/commit/${base}` }, shortSha(base)), "."]
          : null,
      e.verdict === "known" && (e.known_issues || []).length
        ? [" — ", (e.known_issues || []).map((url) => knownIssue(url, (e.known_authors || {})[url])).flatMap((a, i) => i ? [", ", a] : [a]), "."]
        : null));
  }
  if (e.reason) parts.push(el("p", { class: "why" }, el("strong", {}, "Why: "), e.reason));
  if (e.reported_conclusion) {
    parts.push(el("p", { class: "why" }, el("strong", {}, "GitHub's record stands: "),
      `the downstream reported ${e.reported_conclusion}; GitHub says the job ended ${e.state}.`));
  }
  if (e.failure_kind) parts.push(el("p", { class: "why" }, el("strong", {}, "The downstream says: "), `${e.failure_kind} failure`));
  if (e.triage) {
    const t = e.triage;
    parts.push(el("p", { class: "why triage" }, el("strong", {}, "Downstream's triage (advice, not a verdict): "),
      [t.category, t.confidence ? `${t.confidence} confidence` : null].filter(Boolean).join(", "),
      t.summary ? [" — ", t.summary] : null));
  }
  if (e.failed_tests && e.failed_tests.length) {
    const more = (e.failed_tests_total || e.failed_tests.length) - e.failed_tests.length;
    parts.push(el("div", { class: "tests-failed" },
      el("strong", {}, `Failing tests (${e.failed_tests_total || e.failed_tests.length}):`),
      el("ul", {}, e.failed_tests.map((t) => el("li", {},
        el("code", {}, t.classname ? `${t.classname}.${t.name}` : t.name),
        typeof t.duration === "number" ? el("span", { class: "muted" }, ` (${testDuration(t.duration)})`) : null,
        t.message ? el("pre", { class: "message" }, t.message) : null))),
      more > 0 ? el("p", { class: "muted" }, `and ${more} more in the downstream run's log`) : null));
  } else if (e.trimmed && e.failed_tests_total) {
    parts.push(el("p", { class: "why muted" }, `${e.failed_tests_total} failing tests: their names are left out of this `
      + "page (its commit has too many job attempts to list them all); see the downstream run's log."));
  }
  const run = safeUrl(e.url);
  if (parts.length && run) parts.push(el("p", { class: "why" }, el("a", { href: run, rel: "noopener noreferrer" }, "Open the log of this run ↗")));
  return parts;
}

function jobsTable(entries, options) {
  const showCommit = options && options.showCommit;
  const showRepo = !showCommit && !(options && options.grouped);
  const columns = 8 + (showCommit ? 2 : 0) + (showRepo ? 1 : 0);
  const rows = [];
  for (const e of entries) {
    const run = safeUrl(e.url);
    const state = stateOf(e.state);
    rows.push(el("tr", { "data-state": e.state, "data-job": e.job, "data-key": e.key },
      showCommit ? el("td", { class: "when" }, when(e.dispatched_at)) : null,
      showCommit ? el("td", {}, el("a", { class: "mono", href: `/hud/commit/${e.head_sha}` }, shortSha(e.head_sha)),
        e.pr ? [" ", el("a", { href: `/hud/pr/${e.pr}` }, `#${e.pr}`)] : el("span", { class: "muted" }, ` ${e.event_type || "push"}`)) : null,
      showRepo ? el("td", {}, el("a", { href: repoPath(e.repo) }, e.repo), " ", levelBadge(e.level)) : null,
      el("td", {}, e.workflow || "–", e.ciflow ? [" ", el("span", { class: "flag" }, `ciflow/${e.ciflow}`)] : null),
      el("td", {}, e.job),
      el("td", { class: "num" }, e.attempt ? String(e.attempt) : "–"),
      el("td", { class: "result" }, stateBadge(e.state, null, null), e.verdict && FAILED.includes(state) || e.verdict === "flaky" ? [" ", verdictTag(e.verdict)] : null),
      el("td", {}, tests(e.tests)),
      el("td", { class: "num" }, duration(e.queue_s)),
      el("td", { class: "num" }, duration(e.run_s)),
      el("td", {}, run ? el("a", { href: run, rel: "noopener noreferrer" }, "log ↗") : "–")));
    const details = FAILED.includes(state) || e.verdict || e.reported_conclusion ? failureDetails(e, options) : [];
    if (details.length) rows.push(el("tr", { class: "details", "data-details-for": e.key }, el("td", { colspan: String(columns) }, details)));
  }
  return el("div", { class: "scroll" }, labelled(el("table", { class: "jobs" },
    el("thead", {}, el("tr", {},
      showCommit ? el("th", { scope: "col" }, "Dispatched") : null,
      showCommit ? el("th", { scope: "col" }, "Upstream commit") : null,
      showRepo ? el("th", { scope: "col" }, "Downstream repository") : null,
      el("th", { scope: "col" }, "Workflow"), el("th", { scope: "col" }, "Job"), el("th", { scope: "col", class: "num" }, "Attempt"),
      el("th", { scope: "col" }, "Result"), el("th", { scope: "col" }, "Tests"), el("th", { scope: "col", class: "num" }, "Queue"),
      el("th", { scope: "col", class: "num" }, "Run"), el("th", { scope: "col" }, "Log"))),
    el("tbody", {}, rows))));
}

// Each cell names its column, for the phone layout (where a row is a block and the header is hidden).
function labelled(table) {
  const names = [...table.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of table.querySelectorAll("tbody tr:not(.details)")) {
    [...row.children].forEach((td, i) => td.setAttribute("data-label", names[i] || ""));
  }
  return table;
}

function plannedLine(repo, plan, doc) {
  const state = plan.state === "pending" && doc.superseded_by ? "superseded" : plan.state;
  const badge = stateBadge(state, null, null);
  let text;
  if (state === "pending") text = `dispatched ${ago(plan.since)} ago; no job has started yet (the relay times it out if none starts)`;
  else if (state === "superseded") text = ["the PR moved on to ", el("a", { class: "mono", href: `/hud/commit/${doc.superseded_by}` }, shortSha(doc.superseded_by)), " before a job started here"];
  else if (state === "dispatched") text = "dispatched; L1 records no results, so none are shown here";
  else if (state === "held") text = "held: the PR's author is not trusted yet; a maintainer's ciflow/ label releases it";
  else if (state === "skipped") text = plan.reason === "no_matching_files" ? "skipped: no matching files — the change touched no file this repository's path filters select" : `skipped: ${reasonText(plan.reason)}`;
  else text = `not targeted: ${reasonText(plan.reason)}`;
  return el("p", { class: "planned", "data-planned": state }, badge, " ", text);
}

// ---------------------------------------------------------------- pages

function tabs(active) {
  const items = [["prs", "/hud/", "Pull requests"], ["trunk", "/hud/trunk", "Trunk"], ["nightly", "/hud/nightly", "Nightly"],
    ["shadow", "/hud/shadow", "Shadow"]];
  return el("nav", { class: "tabs", "aria-label": "views" }, items.map(([key, href, text]) =>
    el("a", { href, class: key === active ? "tab active" : "tab", "aria-current": key === active ? "page" : null }, text)));
}

function renderOverview(doc, view, regs) {
  const all = doc.commits || [];
  const commits = view === "trunk" ? (doc.trunk || all.filter((c) => !c.pr)) : all.filter((c) => c.pr);
  const repos = reposOf(commits, doc.repos);
  const what = view === "trunk" ? "Trunk: pushes and nightly runs" : "Pull requests";
  return [
    tabs(view === "trunk" ? "trunk" : "prs"),
    el("h1", {}, what),
    el("p", { class: "meta" }, `${plural(commits.length, "commit")} × ${plural(repos.length, "downstream repository", "downstream repositories")}, newest first. `,
      "Each cell is the worst result among that repository's jobs on the commit (newest attempt of each); ",
      "a repository no job has reported on yet shows whether it was dispatched (and how long ago), held, skipped or not targeted."),
    view === "trunk" ? el("p", { class: "meta" }, "A cell marked ", el("span", { class: "broken open" }, "broken since"),
      " is a job's first failure after it passed: the range names the commits that could have broken it.") : null,
    commitsGrid(commits, repos, { empty: view === "trunk" ? "No push or nightly results recorded yet." : "No pull-request results recorded yet.",
      broken: view === "trunk" ? brokenCells(regs) : null }),
  ];
}

function worstOf(jobs) {
  const states = Object.values(jobs).map((j) => j.state);
  return states.sort((a, b) => severity(a) - severity(b))[0] || "none";
}

// A shadow relay's decisions: what it would have sent, apart from anything live, newest event first.
const SHADOWED = { dispatch: "WOULD DISPATCH", hold: "HELD", skip: "SKIPPED" };

function shadowEvent(first) {
  const what = first.pr ? `PR #${first.pr}` : first.event === "push" ? "push" : first.event;
  return el("div", { class: "meta" }, el("strong", {}, what), first.action ? ` ${first.action}` : "", " at ",
    el("a", { class: "mono", href: `/hud/commit/${first.head_sha}` }, shortSha(first.head_sha)), " · delivery ",
    el("span", { class: "mono" }, first.delivery_id), " · ", when(first.received_at));
}

function shadowLine(d) {
  const payload = d.payload ? el("details", {}, el("summary", {}, "payload it would have sent"),
    el("pre", { class: "payload" }, JSON.stringify({ ...d.payload, ...(d.target || {}) }, null, 2))) : null;
  return el("li", { class: `shadow-decision decided-${d.decision}`, "data-repo": d.repo },
    el("a", { href: repoPath(d.repo) }, d.repo), ` L${d.level} `,
    el("span", { class: `sstate s-${d.decision}` }, SHADOWED[d.decision] || d.decision),
    d.reason ? el("span", { class: "reason" }, ` · ${d.reason.replace(/_/g, " ")}`) : null, payload);
}

// The last comparison with the relay in service (crcr shadow compare --publish): its agreement and each difference.
function renderCompared(report) {
  if (!report) return el("p", { class: "meta" }, "No comparison with the relay in service published yet (crcr shadow compare --publish).");
  const share = report.agreement === null || report.agreement === undefined ? "" : ` (${(report.agreement * 100).toFixed(1)}%)`;
  const lines = [];
  for (const e of report.events || []) {
    const what = e.pr ? `PR #${e.pr}` : e.event || "event";
    for (const d of e.only_shadow || []) lines.push([e, what, d, "only this relay would dispatch"]);
    for (const d of e.only_in_service || []) lines.push([e, what, d, "only the relay in service dispatched"]);
    for (const d of (e.both || []).filter((b) => b.reason)) lines.push([e, what, d, "both dispatched"]);
  }
  return el("section", { class: "compared", "aria-label": "comparison with the relay in service" },
    el("h2", {}, "Compared with the relay in service"),
    el("p", { class: "meta", id: "agreement" }, `${report.pairs_agreeing} of ${plural(report.pairs_compared, "event and downstream pair")} agree${share}, compared `, when(report.compared_at), "."),
    lines.length ? el("ul", { class: "differences" }, lines.map(([e, what, d, side]) =>
      el("li", { "data-delivery": e.delivery_id, "data-repo": d.repo }, el("strong", {}, what), ` · ${d.repo}: ${side} · `,
        el("span", { class: "reason" }, String(d.reason).replace(/_/g, " "))))) : el("p", { class: "empty" }, "No difference."));
}

function renderShadow(doc, compared) {
  const decisions = (doc && doc.decisions) || [];
  const events = new Map();
  for (const d of decisions) events.set(d.delivery_id, [...(events.get(d.delivery_id) || []), d]);
  const intro = doc && doc.mode === "shadow"
    ? "This relay runs in shadow: it plans every upstream event as it would live and sends nothing to these downstreams."
    : "Downstreams whose allowlist entry says mode: shadow are planned and recorded here; nothing is sent to them.";
  return [
    tabs("shadow"),
    el("h1", {}, "Shadow decisions"),
    el("p", { class: "meta" }, intro, " Each event lists, per downstream, the dispatch it would have sent or why it was held or skipped. ",
      "None of it reached a downstream, a check run, a comment or PyTorch's HUD."),
    renderCompared(compared),
    el("h2", {}, "Decisions, newest event first"),
    events.size ? el("ol", { class: "shadow-events" }, [...events.values()].map((ds) =>
      el("li", { class: "shadow-event", "data-delivery": ds[0].delivery_id }, shadowEvent(ds[0]),
        el("ul", { class: "shadow-decisions" }, ds.sort((a, b) => a.repo.localeCompare(b.repo)).map(shadowLine)))))
      : el("p", { class: "empty" }, "No shadow decisions recorded: every downstream is live."),
  ];
}

function renderNightly(doc, index, regs) {
  const broken = brokenCells(regs, true);
  const days = Object.keys((doc && doc.days) || {}).sort().reverse();
  const seen = new Map();
  for (const r of (index && index.repos) || []) if (r.nightly_only) seen.set(r.repo, r);
  for (const day of days) for (const repo of Object.keys(doc.days[day])) if (!seen.has(repo)) seen.set(repo, { repo });
  const repos = [...seen.values()].sort((a, b) => a.repo.toLowerCase().localeCompare(b.repo.toLowerCase()));
  const out = [tabs("nightly"), el("h1", {}, "Nightly runs"),
    el("p", { class: "meta" }, "Scheduled runs of nightly-only and scheduled downstreams, one row per day (UTC), newest first. ",
      "Each cell is the worst of that day's runs (newest attempt of each job).")];
  if (!days.length || !repos.length) return [...out, el("p", { class: "empty" }, "No nightly results recorded yet.")];
  out.push(el("div", { class: "gridwrap" }, el("table", { class: "grid nightly" },
    el("caption", { class: "sr-only" }, "Days and each scheduled downstream's nightly result"),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Day"), repos.map((r) => repoHeader({ ...r, level: r.level || null })))),
    el("tbody", {}, days.map((day) => el("tr", { "data-day": day }, el("td", { class: "when" }, day),
      repos.map(({ repo }) => {
        const jobs = doc.days[day][repo];
        const cellDoc = jobs ? { state: worstOf(jobs), jobs: Object.keys(jobs).length,
          failed: Object.values(jobs).filter((j) => FAILED.includes(j.state)).length,
          passed: Object.values(jobs).filter((j) => !FAILED.includes(j.state) && j.state !== "running").length,
          running: Object.values(jobs).filter((j) => j.state === "running").length } : null;
        const sha = jobs ? Object.values(jobs).sort((a, b) => (b.at || 0) - (a.at || 0))[0].sha : null;
        const shas = jobs ? [...new Set(Object.values(jobs).map((j) => j.sha))] : [];
        return el("td", { class: "cellwrap", "data-repo": repo, "data-label": repo.split("/")[1] || repo },
          cellFor(repo, cellDoc, sha ? `/hud/commit/${sha}#${encodeURIComponent(repo)}` : null),
          shas.map((s) => brokenSince(broken, repo, s)));
      })))))));
  return out;
}

function renderCommit(doc) {
  const entries = Object.values(doc.jobs || {});
  const byRepo = new Map();
  for (const e of entries) {
    if (!byRepo.has(e.repo)) byRepo.set(e.repo, []);
    byRepo.get(e.repo).push(e);
  }
  const planned = doc.planned || {};
  for (const repo of Object.keys(planned)) if (!byRepo.has(repo)) byRepo.set(repo, []);
  const upstream = doc.upstream || "";
  const meta = doc.meta || {};
  const context = { base_sha: meta.base_sha };
  const sections = [...byRepo.entries()].sort((a, b) => a[0].localeCompare(b[0])).map(([repo, jobs]) => {
    jobs.sort((a, b) => severity(a.state) - severity(b.state) || a.job.localeCompare(b.job) || b.attempt - a.attempt);
    const level = jobs.length ? jobs[0].level : (planned[repo] || {}).level;
    return el("section", { id: repo, "data-repo": repo },
      el("h2", {}, el("a", { href: repoPath(repo) }, repo), " ", levelBadge(level)),
      jobs.length ? jobsTable(jobs, { grouped: true, base_sha: context.base_sha }) : plannedLine(repo, planned[repo], doc));
  });
  const latest = [...latestAttempts(entries).values()];
  const failed = latest.filter((e) => FAILED.includes(e.state)).length;
  const fresh = latest.filter((e) => e.verdict === "new").length;
  return [
    el("h1", {}, "Upstream commit ", el("span", { class: "mono" }, shortSha(doc.sha)), meta.title ? [" ", el("span", { class: "title" }, meta.title)] : null),
    el("p", { class: "meta" }, joinMeta([
      meta.author ? el("span", {}, "by ", el("strong", {}, meta.author)) : null,
      meta.at ? when(meta.at) : null,
      doc.pr ? el("span", {}, el("a", { href: `/hud/pr/${doc.pr}` }, `PR #${doc.pr}`), " ", prState(meta.pr_state)) : el("span", {}, doc.event_type || "push"),
      doc.ciflow ? el("span", { class: "flag" }, `ciflow/${doc.ciflow}`) : null,
      meta.base_sha ? el("span", {}, "base ", el("a", { class: "mono", href: `/hud/commit/${meta.base_sha}` }, shortSha(meta.base_sha))) : null,
      external(`https://github.com/${upstream}/commit/${doc.sha}`, `${upstream} on GitHub ↗`),
    ])),
    doc.superseded_by ? el("p", { class: "notice" }, "The PR moved on: superseded by ",
      el("a", { class: "mono", href: `/hud/commit/${doc.superseded_by}` }, shortSha(doc.superseded_by)), ". Dispatches not yet started here are not waited for.") : null,
    el("p", { class: "meta summary" }, `${plural(entries.length, "job attempt")} in ${plural(byRepo.size, "repository", "repositories")}; `,
      `${failed} of the newest attempts failed or timed out`, fresh ? [", ", el("strong", { class: "bad" }, `${fresh} new`)] : null, "."),
    el("p", { class: "mono full-sha" }, doc.sha),
    sections.length ? sections : el("p", { class: "empty" }, "No downstream results recorded for this commit yet."),
  ];
}

async function renderPr(doc) {
  const commits = doc.commits || [];
  const repos = reposOf(commits);
  const upstream = doc.upstream || "";
  const out = [
    el("h1", {}, `#${doc.pr}`, doc.title ? [" ", el("span", { class: "title" }, doc.title)] : " Pull request"),
    el("p", { class: "meta" }, joinMeta([
      prState(doc.pr_state),
      doc.author ? el("span", {}, "by ", el("strong", {}, doc.author)) : null,
      el("span", {}, `${plural(commits.length, "commit")} with downstream results`),
      external(`https://github.com/${upstream}/pull/${doc.pr}`, `${upstream}#${doc.pr} on GitHub ↗`),
    ])),
    el("h2", {}, "Commits of this PR, newest first"),
    commitsGrid(commits, repos, { noPr: true }),
  ];
  if (commits.length) {
    const head = await fetchDoc(`/hud/data/commit/${commits[0].sha}.json`);
    if (head) {
      const entries = Object.values(head.jobs || {});
      entries.sort((a, b) => severity(a.state) - severity(b.state) || a.repo.localeCompare(b.repo) || a.job.localeCompare(b.job));
      const context = { base_sha: (head.meta || {}).base_sha };
      const ciflow = entries.filter((e) => e.ciflow);
      const own = entries.filter((e) => !e.ciflow);
      out.push(el("h2", {}, "Jobs on the newest commit ", el("a", { class: "mono", href: `/hud/commit/${head.sha}` }, shortSha(head.sha))));
      out.push(own.length ? jobsTable(own, context) : el("p", { class: "empty" }, "No PR job has reported on it yet."));
      const waiting = Object.entries(head.planned || {}).filter(([repo]) => !entries.some((e) => e.repo === repo));
      if (waiting.length) out.push(el("div", { class: "waiting" }, waiting.map(([repo, plan]) => el("div", { "data-repo": repo },
        el("a", { href: repoPath(repo) }, repo), " ", plannedLine(repo, plan, head)))));
      if (ciflow.length) {
        const names = [...new Set(ciflow.map((e) => `ciflow/${e.ciflow}`))].join(", ");
        out.push(el("h2", { id: "ciflow" }, `${names} runs of this PR`));
        out.push(jobsTable(ciflow, context));
      }
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
  const has = (v) => v !== null && v !== undefined;
  const rows = [
    figureRow("Finished PR jobs counted", String(h.jobs ?? "–"), h.min_jobs ? `≥ ${h.min_jobs} to judge` : "", h.min_jobs ? (h.jobs || 0) >= h.min_jobs : null),
    figureRow("Pass rate", percent(h.pass_rate), has(t.pass_rate) ? `≥ ${percent(t.pass_rate)}` : "", has(h.pass_rate) && has(t.pass_rate) ? h.pass_rate >= t.pass_rate : null),
    figureRow("Timeout rate", percent(h.timeout_rate), has(t.timeout_rate) ? `< ${percent(t.timeout_rate)}` : "", has(h.timeout_rate) && has(t.timeout_rate) ? h.timeout_rate < t.timeout_rate : null),
    figureRow("Average queue", duration(h.avg_queue_s), has(t.avg_queue_s) ? `< ${duration(t.avg_queue_s)}` : "", has(h.avg_queue_s) && has(t.avg_queue_s) ? h.avg_queue_s < t.avg_queue_s : null),
    figureRow("Queue P50 / P90", `${duration(h.queue_p50_s)} / ${duration(h.queue_p90_s)}`, "", null),
    figureRow("Execution P50 / P90", `${duration(h.execution_p50_s)} / ${duration(h.execution_p90_s)}`, "", null),
    figureRow("End to end P50", duration(h.p50_end_to_end_s), has(t.p50_end_to_end_s) ? `< ${duration(t.p50_end_to_end_s)}` : "", has(h.p50_end_to_end_s) && has(t.p50_end_to_end_s) ? h.p50_end_to_end_s < t.p50_end_to_end_s : null),
    figureRow("Longest execution", duration(h.max_execution_s), has(t.max_execution_s) ? `< ${duration(t.max_execution_s)}` : "", has(h.max_execution_s) && has(t.max_execution_s) ? h.max_execution_s < t.max_execution_s : null),
    figureRow("Flaky jobs", String(h.flaky ?? 0), "", null),
  ];
  return el("div", { class: "health" },
    el("div", { class: `verdict v-${verdict}`, "data-verdict": verdict },
      el("strong", {}, HEALTH_VERDICTS[verdict] || verdict),
      el("span", { class: "why" }, `finished PR jobs (the newest attempt of each) dispatched in the last ${h.window_days || "?"} days, as of `, when(h.computed_at))),
    el("ul", { class: "reasons" }, (h.reasons || []).map((r) => el("li", {}, r))),
    el("div", { class: "scroll" }, el("table", { class: "figures" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Figure"), el("th", { scope: "col", class: "num" }, "Measured"),
        el("th", { scope: "col", class: "num" }, "Threshold"), el("th", { scope: "col" }, "Met"))),
      el("tbody", {}, rows))));
}

function renderLevelStatus(status, published) {
  if (!status) return null;
  const criteria = status.criteria || [];
  const change = status.change ? `proposed: ${status.change}` : "no level change proposed";
  const tenure = published && published.figures && typeof published.figures.tenure_days === "number"
    ? `${published.figures.tenure_days.toFixed(1)} days at L2 or above (the level check's record)` : null;
  return el("div", { class: "level-status" },
    el("h3", {}, `PyTorch's level criteria (${status.level}, ${status.windowDays}-day window): ${change}`),
    status.noData ? el("p", { class: "muted" }, "No finished PR job in this window: nothing is judged.") : null,
    el("div", { class: "scroll" }, el("table", { class: "figures criteria" },
      el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Criterion"), el("th", { scope: "col", class: "num" }, "Measured"),
        el("th", { scope: "col", class: "num" }, "Target"), el("th", { scope: "col" }, "Met"))),
      el("tbody", {}, criteria.map((c) => figureRow(c.criterion, c.measured, c.target, c.met))))),
    tenure ? el("p", { class: "muted" }, tenure) : null);
}

function trendChart(trend) {
  if (!trend || !trend.length) return null;
  const w = 14;
  const gap = 3;
  const width = trend.length * (w + gap);
  const height = 60;
  const maxTime = Math.max(1, ...trend.map((d) => (d.queue_s || 0) + (d.run_s || 0)));
  const rateBars = trend.map((d, i) => {
    const rate = d.jobs ? d.passed / d.jobs : null;
    const h = rate === null ? 2 : Math.max(2, Math.round(rate * height));
    return svg("rect", { x: i * (w + gap), y: height - h, width: w, height: h, class: rate === null ? "bar-none" : rate >= 0.9 ? "bar-ok" : "bar-bad" },
      svg("title", {}, `${d.day}: ${d.jobs ? `${percent(d.passed / d.jobs)} of ${d.jobs} passed` : "no finished PR job"}`));
  });
  const timeBars = trend.flatMap((d, i) => {
    const q = Math.round(((d.queue_s || 0) / maxTime) * height);
    const r = Math.round(((d.run_s || 0) / maxTime) * height);
    const label = `${d.day}: queue ${duration(d.queue_s)}, run ${duration(d.run_s)}`;
    return [svg("rect", { x: i * (w + gap), y: height - q - r, width: w, height: r, class: "bar-run" }, svg("title", {}, label)),
      svg("rect", { x: i * (w + gap), y: height - q, width: w, height: q, class: "bar-queue" }, svg("title", {}, label))];
  });
  const first = trend[0].day;
  const last = trend[trend.length - 1].day;
  const total = trend.reduce((n, d) => n + d.jobs, 0);
  const passed = trend.reduce((n, d) => n + d.passed, 0);
  return el("div", { class: "trend" },
    el("figure", {}, svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": `Pass rate per day from ${first} to ${last}: ${total ? percent(passed / total) : "–"} of ${total} finished PR jobs overall` }, rateBars),
    el("figcaption", {}, "Pass rate per day (green ≥ 90%)")),
    el("figure", {}, svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
      "aria-label": `Average queue and run time per day from ${first} to ${last}` }, timeBars),
    el("figcaption", {}, "Average queue (light) and run (dark) time per day")),
    el("details", {}, el("summary", {}, "The figures per day"), el("div", { class: "scroll" }, el("table", { class: "figures" },
      el("thead", {}, el("tr", {}, ["Day", "Jobs", "Pass rate", "Queue", "Run"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, trend.map((d) => el("tr", {}, el("td", {}, d.day), el("td", { class: "num" }, String(d.jobs)),
        el("td", { class: "num" }, d.jobs ? percent(d.passed / d.jobs) : "–"), el("td", { class: "num" }, duration(d.queue_s)),
        el("td", { class: "num" }, duration(d.run_s)))))))));
}

function renderRefused(refused) {
  if (!refused || !refused.total) return null;
  const reasons = Object.entries(refused.reasons || {}).sort((a, b) => b[1].count - a[1].count);
  return el("section", { id: "refused", class: "refused", "data-refused": String(refused.total) },
    el("h2", {}, `⚠ ${plural(refused.total, "report")} refused`),
    el("p", {}, "The relay (or PyTorch's HUD) refused these reports from this repository; what they said is not on the pages. Last refusal ",
      when(refused.last_at), "."),
    el("table", { class: "figures" }, el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "Reason"),
      el("th", { scope: "col", class: "num" }, "Count"), el("th", { scope: "col" }, "Last"))),
    el("tbody", {}, reasons.map(([reason, r]) => el("tr", {}, el("td", {}, reason, r.message ? el("div", { class: "muted" }, r.message) : null), el("td", { class: "num" }, String(r.count)), el("td", {}, when(r.last_at)))))));
}

function historyCount(doc) {
  const h = doc.health || {};
  const since = Date.now() / 1000 - (h.window_days || 14) * 86400;
  const latest = new Map();
  for (const e of doc.history || []) {
    if (!e.pr || !FINISHED.includes(e.state) || (e.dispatched_at || 0) < since) continue;
    const [dispatch, run, , job] = String(e.key).split("/");
    const group = `${dispatch}/${run}/${job}`;
    if (!latest.has(group) || e.attempt > latest.get(group).attempt) latest.set(group, e);
  }
  const counted = [...latest.values()];
  const after = counted.filter((e) => h.computed_at && (e.completed_at || e.dispatched_at || 0) > h.computed_at).length;
  return { counted: counted.length, passed: counted.filter((e) => e.state === "success").length, after };
}

function renderRepo(doc, repo, published, regs) {
  const history = doc.history || [];
  const status = published ? (published.repos || []).find((r) => r.repo.toLowerCase() === (doc.repo || repo).toLowerCase()) : null;
  const dedupe = status && status.figures ? status.figures.dispatch_dedupe : null;
  const said = DEDUPE[dedupe];  // not looked at yet: nothing a maintainer could act on, so nothing shown
  const counts = historyCount(doc);
  const other = history.length - history.filter((e) => e.pr).length;
  const h = doc.health;
  return [
    el("h1", {}, doc.repo || repo, " ", levelBadge(doc.level)),
    el("p", { class: "meta" }, joinMeta([
      external(`https://github.com/${doc.repo || repo}`, "repository on GitHub ↗"),
      doc.level ? el("span", {}, `participation level L${doc.level}`) : null])),
    said ? el("p", { class: `dedupe ${said[0]}`, "data-dedupe": dedupe }, said[1]) : null,
    renderRefused(doc.refused),
    renderRegressions(regs, doc.repo || repo),
    el("h2", {}, "Health"),
    renderHealth(h),
    h ? renderLevelStatus(h.level_status, status) : null,
    h && h.trend ? [el("h3", {}, `Trend over ${h.trend.length} days`), trendChart(h.trend)] : null,
    el("h2", {}, `Recent job attempts (${history.length})`),
    el("p", { class: "meta" }, `Of these, ${plural(counts.counted, "finished PR job")} (newest attempt, in the window) are what health counts: `,
      `${counts.passed} of ${counts.counted} passed`,
      counts.after ? `; ${counts.after} of them finished after the figures above were computed` : "",
      other ? `. ${plural(other, "attempt")} of pushes and nightly runs are shown but not counted.` : "."),
    history.length ? jobsTable(history, { showCommit: true }) : el("p", { class: "empty" }, "No job attempts recorded yet."),
  ];
}

function renderNotFound(r, detail) {
  const what = {
    commit: ["No results for this commit", `Nothing is recorded for ${r.sha || "this commit"}: no downstream was dispatched for it, or it is older than the relay keeps (90 days).`],
    pr: ["No results for this pull request", `Nothing is recorded for PR #${r.pr}: no downstream was dispatched for it yet, or it is older than the relay keeps.`],
    repo: ["No results for this repository", `Nothing is recorded for ${r.repo}: it is not allowlisted at L2 or above, or none of its jobs has reported yet.`],
    page: ["No such page", "This address is not a HUD page."],
  }[r.kind] || ["No such page", ""];
  return el("section", { class: "notfound", "data-notfound": r.kind },
    el("h1", {}, what[0]), el("p", {}, detail || what[1]),
    el("p", {}, "Search for a commit (full or short SHA), a PR number or a repository above, or go to ",
      el("a", { href: "/hud/" }, "the pull requests"), ", ", el("a", { href: "/hud/trunk" }, "trunk"), " or ",
      el("a", { href: "/hud/nightly" }, "nightly runs"), "."));
}

// ---------------------------------------------------------------- plumbing

async function fetchDoc(url) {
  const response = await fetch(url, { cache: "no-cache", credentials: "same-origin" });
  if (response.status === 404 || response.status === 503) return null;
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

function route(path) {
  let m;
  if (path === "/hud/" || path === "/hud") return { kind: "overview", view: "prs" };
  if (path === "/hud/trunk") return { kind: "overview", view: "trunk" };
  if (path === "/hud/nightly") return { kind: "nightly" };
  if (path === "/hud/shadow") return { kind: "shadow" };
  if ((m = path.match(/^\/hud\/commit\/([0-9a-fA-F]{7,40})$/))) return { kind: "commit", sha: m[1].toLowerCase() };
  if ((m = path.match(/^\/hud\/pr\/([1-9][0-9]{0,9})$/))) return { kind: "pr", pr: m[1] };
  if ((m = path.match(/^\/hud\/repo\/([A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+)$/))) return { kind: "repo", repo: m[1] };
  return { kind: "page" };
}

function crumbs(r) {
  const parts = [el("a", { href: "/hud/" }, "overview")];
  if (r.kind === "commit") parts.push(" › commit ", el("span", { class: "mono" }, shortSha(r.sha)));
  if (r.kind === "pr") parts.push(` › PR #${r.pr}`);
  if (r.kind === "repo") parts.push(` › ${r.repo}`);
  if (r.kind === "nightly") parts.push(" › nightly");
  if (r.kind === "shadow") parts.push(" › shadow");
  return parts;
}

function legend() {
  return [el("span", {}, "Legend:"), ...LEGEND.map((s) => stateBadge(s, null, null)),
    el("span", {}, "Failure verdicts:"), ...VERDICT_ORDER.map(verdictTag),
    el("span", {}, "· L3/L4: levels that get upstream check runs (L4 blocking)")];
}

// What a search box entry means: a SHA (full or short, any case), a PR number, or a repository.
function searchTarget(text) {
  const q = String(text || "").trim();
  let m;
  if ((m = q.match(/^#?([1-9][0-9]{0,9})$/))) return `/hud/pr/${m[1]}`;
  if (/^[0-9a-fA-F]{7,40}$/.test(q)) return `/hud/commit/${q.toLowerCase()}`;
  if ((m = q.match(/^(?:https:\/\/github\.com\/)?([A-Za-z0-9_.-]+\/[A-Za-z0-9_.-]+?)\/?$/))) return `/hud/repo/${m[1]}`;
  return null;
}

function searchForm() {
  const input = el("input", { type: "search", id: "q", name: "q", placeholder: "SHA, PR number or owner/repo",
    "aria-label": "Search by commit SHA, PR number or repository", autocomplete: "off", spellcheck: "false" });
  const hint = el("span", { class: "search-hint", role: "status" });
  const form = el("form", { class: "search", role: "search" }, input, el("button", { type: "submit" }, "Go"), hint);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const target = searchTarget(input.value);
    if (target) location.assign(target);
    else hint.textContent = "Type a SHA (7 to 40 hex digits), a PR number or owner/repo";
  });
  return form;
}

// A short or mixed-case SHA: the full one from the overview's commits (the newest the relay lists).
async function resolveSha(r) {
  if (r.sha.length === 40) return { sha: r.sha };
  const index = await fetchDoc("/hud/data/index.json");
  const known = new Map();
  for (const c of [...((index && index.commits) || []), ...((index && index.trunk) || [])]) known.set(c.sha, c);
  const found = [...known.keys()].filter((sha) => sha.startsWith(r.sha));
  if (found.length === 1) return { sha: found[0] };
  if (found.length > 1) return { many: found };
  return { none: true };
}

function targetOfHash() {
  if (!location.hash) return null;
  try {
    return document.getElementById(decodeURIComponent(location.hash.slice(1)));
  } catch (_) {
    return null; // a malformed escape (#%E0%A4%A) names nothing on the page
  }
}

let lastStamp = null;

// Regressions are advice: a page whose route cannot answer is drawn without them.
const REGRESSIONS = "/hud/api/crcr/regressions";
const regressions = () => fetchDoc(REGRESSIONS).catch(() => null);

async function load(r) {
  if (r.kind === "overview") {
    const [doc, regs] = await Promise.all([fetchDoc("/hud/data/index.json"), r.view === "trunk" ? regressions() : null]);
    return { doc, regs };
  }
  if (r.kind === "nightly") {
    const [doc, index, regs] = await Promise.all([fetchDoc("/hud/data/nightly.json"), fetchDoc("/hud/data/index.json"), regressions()]);
    return { doc: doc || (index ? { days: {} } : null), extra: index, regs };
  }
  if (r.kind === "commit") {
    const found = await resolveSha(r);
    if (found.many) return { doc: null, detail: `Several recent commits start with ${r.sha}: ${found.many.join(", ")}. Use more of the SHA.` };
    if (found.none) return { doc: null, detail: `No recent commit starts with ${r.sha}. A full 40-character SHA finds any commit the relay keeps.` };
    if (found.sha !== r.sha || location.pathname !== `/hud/commit/${found.sha}`) {
      r.sha = found.sha;
      history.replaceState(null, "", `/hud/commit/${found.sha}${location.hash}`);
    }
    return { doc: await fetchDoc(`/hud/data/commit/${r.sha}.json`) };
  }
  if (r.kind === "pr") return { doc: await fetchDoc(`/hud/data/pr/${r.pr}.json`) };
  if (r.kind === "shadow") {
    const [doc, compared] = await Promise.all([fetchDoc("/hud/api/crcr/shadow"), fetchDoc("/hud/api/crcr/shadow/compare").catch(() => null)]);
    const stamp = [(doc && doc.decisions || []).map((d) => `${d.delivery_id}/${d.repo}`).join(","), compared ? compared.compared_at : ""].join("|");
    return { doc: { ...(doc || { decisions: [] }), stamp }, extra: compared };
  }
  if (r.kind === "repo") {
    const [doc, published, regs] = await Promise.all([fetchDoc(repoDoc(r.repo)),
      fetchDoc("/hud/api/crcr/level-status").catch(() => null), regressions()]);
    return { doc, extra: published, regs };
  }
  return { doc: null };
}

async function render() {
  const r = route(location.pathname);
  const main = document.getElementById("main");
  let loaded;
  try {
    loaded = await load(r);
  } catch (err) {
    main.replaceChildren(el("p", { class: "error" }, `Could not load the data: ${err.message}`));
    document.body.dataset.ready = "true";
    return;
  }
  const doc = loaded.doc;
  const stamp = doc ? doc.updated_at || null : null;
  // A composed page's digest of what it shows (a verdict changes no time), and when the regressions last changed.
  const seen = doc ? `${doc.stamp || stamp}|${loaded.regs ? loaded.regs.updated_at : ""}` : null;
  if (lastStamp !== null && seen === lastStamp) return; // nothing new: keep the page (and the scroll) as is
  lastStamp = seen;
  let content;
  if (r.kind === "overview") content = renderOverview(doc || { commits: [] }, r.view, loaded.regs);
  else if (r.kind === "nightly") content = renderNightly(doc, loaded.extra, loaded.regs);
  else if (r.kind === "shadow") content = renderShadow(doc, loaded.extra);
  else if (!doc) content = renderNotFound(r, loaded.detail);
  else if (r.kind === "commit") content = renderCommit(doc);
  else if (r.kind === "pr") content = await renderPr(doc);
  else content = renderRepo(doc, r.repo, loaded.extra, loaded.regs);
  main.replaceChildren(...[content].flat(Infinity).filter(Boolean));
  document.getElementById("crumbs").replaceChildren(...crumbs(r));
  document.getElementById("updated").replaceChildren(stamp ? el("span", {}, "data updated ", when(stamp)) : "");
  const titles = { overview: r.view === "trunk" ? "trunk" : "pull requests", nightly: "nightly", shadow: "shadow", commit: shortSha(r.sha), pr: `PR #${r.pr}`, repo: r.repo, page: "not found" };
  document.title = `crcr HUD · ${doc || ["overview", "nightly", "shadow"].includes(r.kind) ? titles[r.kind] : "not found"}`;
  const target = targetOfHash();
  if (target) target.scrollIntoView();
  document.body.dataset.ready = "true";
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("legend").replaceChildren(...legend());
  document.getElementById("search").replaceChildren(searchForm());
  render();
  setInterval(render, REFRESH_MS);
});
