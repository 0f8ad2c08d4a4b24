/* neardup playground: search through the proxy, see the groups, move the threshold.
 *
 * Plain browser JavaScript, no build step, nothing loaded from elsewhere. Every request goes to
 * the proxy that served this page (same origin, the browser's own credentials).
 *
 * Safety: text from documents (titles, bodies, ids, index names) and from error messages is
 * only ever written with textContent / createTextNode, never parsed as HTML.
 */
(function () {
  "use strict";

  var SETTINGS_URL = "playground/settings";
  var GROUP_COLOURS = 10;
  var SNIPPET_CHARS = 220;
  var WORD = /[\p{L}\p{N}]+/gu;

  var state = {
    settings: null,      // /_neardup/playground/settings for the chosen index
    modes: [],           // modes the proxy accepts
    seq: 0,              // number of the latest search started
    timer: null,         // pending search after a threshold move
    last: null           // {request, collapsed, plain} of the page shown
  };

  function $(id) { return document.getElementById(id); }

  /** An element with a class and a text, the text set as text (never as HTML). */
  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function setState(name) { document.body.dataset.state = name; }

  function showStatus(message, kind) {
    var status = $("status");
    status.textContent = message || "";
    status.className = kind || "";
  }

  // -- HTTP ----------------------------------------------------------------------------------
  function errorReason(body, status, text) {
    if (body && body.error) {
      if (typeof body.error === "string") return body.error;
      var cause = (body.error.root_cause && body.error.root_cause[0]) || body.error;
      return (cause.type ? cause.type + ": " : "") + (cause.reason || "");
    }
    return "HTTP " + status + (text ? ": " + text.slice(0, 300) : "");
  }

  /** fetch JSON; resolves to {body, headers}, rejects with an Error carrying status and body. */
  function request(method, url, body) {
    var options = {method: method, credentials: "same-origin", headers: {"Accept": "application/json"}};
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    return fetch(url, options).then(function (response) {
      return response.text().then(function (text) {
        var parsed = null;
        try { parsed = text ? JSON.parse(text) : null; } catch (ignored) { parsed = null; }
        if (!response.ok) {
          var error = new Error(errorReason(parsed, response.status, text));
          error.status = response.status;
          error.body = parsed;
          throw error;
        }
        return {body: parsed, headers: response.headers};
      });
    });
  }

  function getJSON(url) { return request("GET", url).then(function (r) { return r.body; }); }

  // -- state in the address (so a view can be shared) -----------------------------------------
  function readHash() {
    var values = {};
    new URLSearchParams(location.hash.replace(/^#/, "")).forEach(function (v, k) { values[k] = v; });
    return values;
  }

  function writeHash() {
    var params = new URLSearchParams();
    params.set("index", $("index").value);
    params.set("q", $("query").value);
    params.set("threshold", threshold().toFixed(2));
    params.set("mode", mode());
    params.set("size", $("size").value);
    params.set("fields", $("fields").value);
    history.replaceState(null, "", "#" + params.toString());
  }

  // -- controls --------------------------------------------------------------------------------
  function threshold() { return Number($("threshold").value); }

  function mode() {
    var checked = document.querySelector("#modes input:checked");
    return checked ? checked.value : "resemblance";
  }

  function fields() {
    return $("fields").value.split(",").map(function (f) { return f.trim(); }).filter(Boolean);
  }

  function renderModes(modes, chosen) {
    var box = $("modes");
    Array.prototype.slice.call(box.querySelectorAll("label")).forEach(function (l) { l.remove(); });
    modes.forEach(function (name) {
      var label = el("label", "mode");
      var input = el("input");
      input.type = "radio";
      input.name = "mode";
      input.value = name;
      input.id = "mode-" + name;
      input.checked = name === chosen;
      input.addEventListener("change", function () { updateConfig(); search(); });
      label.appendChild(input);
      label.appendChild(document.createTextNode(" " + name));
      box.appendChild(label);
    });
    if (!document.querySelector("#modes input:checked") && modes.length) {
      box.querySelector("input").checked = true;
    }
  }

  /** A mode the proxy refused (an older proxy, or one without it): drop it from the switch. */
  function dropMode(name) {
    state.modes = state.modes.filter(function (m) { return m !== name; });
    renderModes(state.modes, state.modes[0]);
  }

  function setThreshold(value) {
    $("threshold").value = String(value);
    $("threshold-value").textContent = threshold().toFixed(2);
  }

  // -- the index picker -------------------------------------------------------------------------
  function loadIndices() {
    return Promise.all([
      getJSON("/_cat/indices?format=json&h=index,docs.count&s=index"),
      getJSON("/_mapping/field/neardup.v").catch(function () { return {}; }),
      getJSON("/_alias").catch(function () { return {}; })
    ]).then(function (answers) {
      var cat = answers[0] || [], mapping = answers[1] || {}, aliases = answers[2] || {};
      var fingerprinted = {};
      Object.keys(mapping).forEach(function (name) {
        var fieldMappings = (mapping[name] || {}).mappings || {};
        if (Object.keys(fieldMappings).length) fingerprinted[name] = true;
      });
      var withPrints = [], without = [], aliasNames = {};
      cat.forEach(function (row) {
        if (!row.index || row.index.charAt(0) === ".") return;
        (fingerprinted[row.index] ? withPrints : without).push(row);
      });
      Object.keys(aliases).forEach(function (index) {
        if (!fingerprinted[index]) return;
        Object.keys((aliases[index] || {}).aliases || {}).forEach(function (a) {
          if (a.charAt(0) !== ".") aliasNames[a] = true;
        });
      });
      var select = $("index");
      select.replaceChildren();
      function group(label, rows, describe) {
        if (!rows.length) return;
        var optgroup = el("optgroup");
        optgroup.label = label;
        rows.forEach(function (row) {
          var option = el("option", null, describe(row));
          option.value = row.index;
          optgroup.appendChild(option);
        });
        select.appendChild(optgroup);
      }
      function withCount(row) { return row.index + " (" + (row["docs.count"] || "0") + " docs)"; }
      group("with neardup fingerprints", withPrints, withCount);
      group("aliases", Object.keys(aliasNames).sort().map(function (a) { return {index: a}; }),
            function (row) { return row.index; });
      group("without fingerprints (never collapsed)", without, withCount);
      return withPrints.length;
    });
  }

  function loadSettings(index) {
    return getJSON(SETTINGS_URL + "?index=" + encodeURIComponent(index)).then(function (settings) {
      state.settings = settings;
      return settings;
    });
  }

  // -- reading documents ------------------------------------------------------------------------
  function valueAt(object, path) {
    if (!object || typeof object !== "object") return undefined;
    if (Object.prototype.hasOwnProperty.call(object, path)) return object[path];
    var dot = path.indexOf(".");
    while (dot > 0) {
      var head = path.slice(0, dot);
      if (Object.prototype.hasOwnProperty.call(object, head)) {
        var found = valueAt(object[head], path.slice(dot + 1));
        if (found !== undefined) return found;
      }
      dot = path.indexOf(".", dot + 1);
    }
    return undefined;
  }

  function asText(value) {
    if (value === undefined || value === null) return "";
    if (typeof value === "string") return value;
    if (Array.isArray(value)) return value.map(asText).filter(Boolean).join(" ");
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  /** {title, body} of a hit: the first field as the title, the others joined as the body. */
  function textOf(hit, names) {
    var parts = names.map(function (name) {
      var value = valueAt(hit._source, name);
      if (value === undefined && hit.fields) value = hit.fields[name];
      return asText(value);
    });
    return {title: parts[0] || "", body: parts.slice(1).filter(Boolean).join("\n\n")};
  }

  function hitKey(hit) { return hit._index + "/" + hit._id; }

  function innerHits(hit) {
    var inner = hit.inner_hits && hit.inner_hits.neardup && hit.inner_hits.neardup.hits;
    return (inner && Array.isArray(inner.hits)) ? inner.hits : [];
  }

  function similarityOf(hit) {
    var value = hit.fields && hit.fields["neardup.similarity"];
    return Array.isArray(value) && typeof value[0] === "number" ? value[0] : null;
  }

  function formatScore(score) { return typeof score === "number" ? score.toFixed(2) : "–"; }

  // -- the words two texts do not share ---------------------------------------------------------
  function wordSet(text) {
    var set = new Set();
    (text.match(WORD) || []).forEach(function (w) { set.add(w.toLowerCase()); });
    return set;
  }

  /** ``text`` as nodes, each word absent from ``other`` (a word set) in a <mark>. */
  function markDifferences(text, other) {
    var fragment = document.createDocumentFragment();
    var last = 0, match;
    WORD.lastIndex = 0;
    while ((match = WORD.exec(text)) !== null) {
      if (!other.has(match[0].toLowerCase())) {
        if (match.index > last) fragment.appendChild(document.createTextNode(text.slice(last, match.index)));
        fragment.appendChild(el("mark", null, match[0]));
        last = match.index + match[0].length;
      }
    }
    if (last < text.length) fragment.appendChild(document.createTextNode(text.slice(last)));
    return fragment;
  }

  /** Title and body as the comparison shows them: the body's hard line breaks (as in wire
   *  stories) become spaces, blank lines stay paragraph breaks. */
  function fullText(parts) {
    var body = parts.body.split(/\n\s*\n/).map(function (p) { return p.replace(/\s+/g, " ").trim(); })
      .filter(Boolean).join("\n\n");
    return body ? parts.title + "\n\n" + body : parts.title;
  }

  function comparison(kept, other) {
    var keptText = fullText(kept), otherText = fullText(other);
    var keptWords = wordSet(keptText), otherWords = wordSet(otherText);
    var box = el("div", "compare");
    [["kept hit", keptText, otherWords, "kept", "this hit"], ["this hit", otherText, keptWords, "other", "the kept hit"]]
      .forEach(function (side) {
        var pane = el("div", "pane " + side[3]);
        var text = el("div", "pane-text");
        text.appendChild(markDifferences(side[1], side[2]));
        var marked = text.querySelectorAll("mark").length;
        pane.appendChild(el("div", "pane-label", side[0] + " · " + marked + (marked === 1 ? " word" : " words") +
                            " not in " + side[4]));
        pane.appendChild(text);
        box.appendChild(pane);
      });
    return box;
  }

  // -- rendering --------------------------------------------------------------------------------
  function hitHead(hit, parts, rank) {
    var head = el("div", "hit-head");
    if (rank !== null) head.appendChild(el("span", "rank", rank));
    head.appendChild(el("span", "title", parts.title || "(no " + (fields()[0] || "title") + ")"));
    return head;
  }

  function hitMeta(hit, extra) {
    var meta = el("div", "meta");
    meta.appendChild(el("span", "doc-id", hit._id));
    if (state.last && state.last.multiIndex) meta.appendChild(el("span", "doc-index", hit._index));
    meta.appendChild(el("span", "score", "score " + formatScore(hit._score)));
    (extra || []).forEach(function (node) { meta.appendChild(node); });
    return meta;
  }

  function snippet(text) {
    var flat = text.replace(/\s+/g, " ").trim();
    return flat.length > SNIPPET_CHARS ? flat.slice(0, SNIPPET_CHARS).replace(/\s+\S*$/, "") + " …" : flat;
  }

  function renderMember(member, keptParts, names, used) {
    var parts = textOf(member, names);
    var li = el("li", "member");
    li.dataset.id = member._id;
    var similarity = similarityOf(member);
    var badge = el("span", "similarity", similarity === null ? "similarity n/a" :
                   "similarity " + similarity.toFixed(2));
    if (similarity !== null) {
      badge.dataset.value = String(similarity);
      if (similarity < used.threshold) {
        badge.classList.add("transitive");
        badge.title = "below the threshold: folded in through another member of the group";
      }
    }
    li.appendChild(hitHead(member, parts, null));
    li.appendChild(hitMeta(member, [badge]));
    li.appendChild(comparison(keptParts, parts));
    return li;
  }

  function toggleGroup(li, open) {
    var button = li.querySelector(".toggle");
    var members = li.querySelector(".members");
    if (!button || !members) return;
    var show = open === undefined ? members.hidden : open;
    members.hidden = !show;
    button.setAttribute("aria-expanded", show ? "true" : "false");
    button.textContent = (show ? "▾ Hide " : "▸ Show ") + button.dataset.count + " collapsed";
  }

  function renderGroups(response, names) {
    var list = $("groups");
    list.replaceChildren();
    $("expand-all").textContent = "Expand all groups";
    var used = response.neardup || {threshold: threshold(), mode: mode()};
    var hits = (response.hits && response.hits.hits) || [];
    hits.forEach(function (top, k) {
      var members = innerHits(top);
      var parts = textOf(top, names);
      var li = el("li", "group g" + (k % GROUP_COLOURS) + (members.length ? " has-members" : ""));
      li.dataset.id = top._id;
      li.dataset.members = String(members.length);
      var count = el("span", "count", (members.length + 1) + (members.length ? " hits" : " hit"));
      li.appendChild(hitHead(top, parts, k + 1));
      li.appendChild(hitMeta(top, [count]));
      if (parts.body) li.appendChild(el("p", "snippet", snippet(parts.body)));
      if (members.length) {
        var button = el("button", "toggle secondary");
        button.type = "button";
        button.dataset.count = String(members.length);
        button.addEventListener("click", function () { toggleGroup(li); });
        li.appendChild(button);
        var ol = el("ol", "members");
        members.forEach(function (member) { ol.appendChild(renderMember(member, parts, names, used)); });
        li.appendChild(ol);
        toggleGroup(li, false);
      }
      list.appendChild(li);
    });
    if (!hits.length) list.appendChild(el("li", "empty", "No hits."));
  }

  function renderPlain(plain, collapsed, names) {
    var list = $("plain");
    list.replaceChildren();
    var groupOf = new Map();
    ((collapsed.hits && collapsed.hits.hits) || []).forEach(function (top, k) {
      groupOf.set(hitKey(top), {group: k, kept: true});
      innerHits(top).forEach(function (m) { groupOf.set(hitKey(m), {group: k, kept: false}); });
    });
    var hits = (plain.hits && plain.hits.hits) || [];
    hits.forEach(function (hit, rank) {
      var place = groupOf.get(hitKey(hit));
      var li = el("li", "plain-hit" + (place ? " g" + (place.group % GROUP_COLOURS) + (place.kept ? " kept" : " folded") : ""));
      li.dataset.id = hit._id;
      var where = place ? (place.kept ? "kept · group " + (place.group + 1)
                                      : "folded into group " + (place.group + 1))
                        : "not on the collapsed page";
      li.appendChild(hitHead(hit, textOf(hit, names), rank + 1));
      li.appendChild(hitMeta(hit, [el("span", "where", where)]));
      list.appendChild(li);
    });
    if (!hits.length) list.appendChild(el("li", "empty", "No hits."));
  }

  function renderSummary(collapsed, plain, skipped) {
    var summary = $("summary");
    summary.replaceChildren();
    var nd = collapsed.neardup;
    var total = collapsed.hits && collapsed.hits.total;
    var totalText = total && typeof total === "object" ? (total.relation === "gte" ? "≥ " : "") + total.value : total;
    var rows = nd ? [
      ["threshold", Number(nd.threshold).toFixed(2), "threshold"],
      ["mode", nd.mode, "mode"],
      ["groups on the page", nd.groups, "groups"],
      ["hits collapsed", nd.collapsed, "collapsed"],
      ["hits fetched (window)", nd.window, "window"],
      ["with a fingerprint", nd.fingerprinted, "fingerprinted"],
      ["page complete", nd.complete ? "yes" : "no", "complete"],
      ["matching documents", totalText, "total"],
      ["took (collapsed / plain)", collapsed.took + " / " + plain.took + " ms", "took"]
    ] : [["not collapsed", skipped || "the proxy did not collapse this search", "skipped"]];
    rows.forEach(function (row) {
      var item = el("div", "stat");
      item.dataset.key = row[2];
      item.appendChild(el("dt", null, row[0]));
      item.appendChild(el("dd", null, row[1]));
      summary.appendChild(item);
    });
  }

  // -- the config snippet -------------------------------------------------------------------------
  function tomlKey(name) { return "\"" + name.replace(/\\/g, "\\\\").replace(/"/g, "\\\"") + "\""; }

  function updateConfig() {
    var settings = state.settings;
    var index = $("index").value;
    var scope = document.querySelector("input[name=scope]:checked").value;
    var t = threshold().toFixed(2), m = mode();
    var lines = ["# config/neardup.toml"];
    if (scope === "global") {
      lines.push("[collapse]");
      if (settings && !settings.defaults.enabled) lines.push("enabled = true");
    } else {
      var pattern = settings && settings.collapse.override ? settings.collapse.override : index;
      lines.push("[collapse.indices." + tomlKey(pattern || "my-index") + "]");
      if (settings && !settings.collapse.enabled) lines.push("enabled = true");
    }
    lines.push("threshold = " + t);
    lines.push("mode = \"" + m + "\"");
    $("snippet").textContent = lines.join("\n");
    $("request-params").textContent = "?neardup_threshold=" + t + "&neardup_mode=" + m;
    $("threshold-value").textContent = t;
  }

  // -- searching --------------------------------------------------------------------------------
  function searchBody() {
    var text = $("query").value.trim();
    var names = fields();
    var query = text ? {multi_match: {query: text, fields: names.length ? names : ["*"]}} : {match_all: {}};
    return {size: Number($("size").value), query: query, _source: {excludes: ["neardup"]}};
  }

  function searchPath(index, controls) {
    return "/" + encodeURIComponent(index) + "/_search?" + controls;
  }

  function search() {
    clearTimeout(state.timer);
    var index = $("index").value;
    if (!index) return Promise.resolve();
    writeHash();
    var seq = ++state.seq;
    var body = searchBody();
    var names = fields();
    var controls = "neardup=on&neardup_threshold=" + threshold().toFixed(2) + "&neardup_mode=" + encodeURIComponent(mode());
    var collapsedPath = searchPath(index, controls);
    var plainPath = searchPath(index, "neardup=off");
    $("request-text").textContent = "POST " + collapsedPath + "\n" + JSON.stringify(body) +
      "\n\n# the right-hand column: the same body, without collapsing\nPOST " + plainPath;
    setState("loading");
    showStatus("Searching…", "busy");
    return Promise.all([request("POST", collapsedPath, body), request("POST", plainPath, body)])
      .then(function (answers) {
        if (seq !== state.seq) return;   // a newer search is under way
        var collapsed = answers[0].body, plain = answers[1].body;
        state.last = {path: collapsedPath, body: body, collapsed: collapsed, plain: plain,
                      multiIndex: index.indexOf(",") >= 0 || index.indexOf("*") >= 0};
        renderSummary(collapsed, plain, answers[0].headers.get("X-Neardup-Skipped"));
        renderGroups(collapsed, names);
        renderPlain(plain, collapsed, names);
        showStatus("");
        document.body.dataset.seq = String(seq);
        setState("ready");
      })
      .catch(function (error) {
        if (seq !== state.seq) return;
        if (error.status === 400 && /neardup_mode/.test(error.message) && mode() !== "resemblance") {
          var refused = mode();
          dropMode(refused);
          showStatus("The proxy does not accept mode " + refused + "; it was removed.", "error");
          return search();
        }
        showStatus(error.message, "error");
        setState("error");
      });
  }

  function searchSoon() {
    clearTimeout(state.timer);
    state.timer = setTimeout(search, 250);
  }

  function chooseIndex(index, keepControls) {
    return loadSettings(index).then(function (settings) {
      if (!keepControls) {
        setThreshold(settings.collapse.threshold);
        renderModes(state.modes, settings.collapse.mode);
      }
      updateConfig();
    });
  }

  // -- start ------------------------------------------------------------------------------------
  function start() {
    var hash = readHash();
    $("controls").addEventListener("submit", function (event) { event.preventDefault(); search(); });
    $("threshold").addEventListener("input", function () { updateConfig(); searchSoon(); });
    $("threshold").addEventListener("change", function () { updateConfig(); search(); });
    $("size").addEventListener("change", search);
    $("index").addEventListener("change", function () {
      chooseIndex($("index").value, false).then(search, function (e) { showStatus(e.message, "error"); });
    });
    Array.prototype.forEach.call(document.querySelectorAll("input[name=scope]"), function (input) {
      input.addEventListener("change", updateConfig);
    });
    $("expand-all").addEventListener("click", function () {
      var groups = Array.prototype.slice.call(document.querySelectorAll("#groups .group.has-members"));
      var open = groups.some(function (g) { return g.querySelector(".members").hidden; });
      groups.forEach(function (g) { toggleGroup(g, open); });
      $("expand-all").textContent = open ? "Collapse all groups" : "Expand all groups";
    });
    $("copy").addEventListener("click", function () {
      var text = $("snippet").textContent;
      var done = function () { showStatus("Config copied.", ""); };
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, function () { selectSnippet(); });
      } else {
        selectSnippet();
      }
    });

    setState("loading");
    getJSON(SETTINGS_URL).then(function (settings) {
      state.modes = settings.modes;
      $("fields").value = hash.fields || settings.fields.join(", ");
      if (hash.q) $("query").value = hash.q;
      if (hash.size) $("size").value = hash.size;
      return loadIndices();
    }).then(function () {
      var select = $("index");
      if (hash.index) {
        var known = Array.prototype.some.call(select.options, function (o) { return o.value === hash.index; });
        if (!known) {
          var option = el("option", null, hash.index);
          option.value = hash.index;
          select.appendChild(option);
        }
        select.value = hash.index;
      }
      if (!select.value) {
        showStatus("No index to search: load and enrich one first (neardup index).", "error");
        setState("ready");
        return null;
      }
      var fromHash = hash.threshold !== undefined || hash.mode !== undefined;
      return chooseIndex(select.value, false).then(function () {
        if (hash.threshold !== undefined && !isNaN(Number(hash.threshold))) setThreshold(hash.threshold);
        if (hash.mode && state.modes.indexOf(hash.mode) >= 0) renderModes(state.modes, hash.mode);
        if (fromHash) updateConfig();
        return search();
      });
    }).catch(function (error) {
      showStatus(error.message, "error");
      setState("error");
    });
  }

  function selectSnippet() {
    var range = document.createRange();
    range.selectNodeContents($("snippet"));
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    showStatus("Config selected: press Ctrl+C to copy.", "");
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
}());
