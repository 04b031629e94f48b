/// The history browser's markup (`STYLE` and `SCRIPT` are replaced by ``style`` and the script)
/// and its style sheet. No data is ever part of them.
extension HistoryPage {
    static let template = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>SyncLedger history</title>
<link rel="icon" href="data:,">
<style>STYLE</style>
</head>
<body>
<header><h1>SyncLedger history</h1><span id="signed-in" hidden><span id="who"></span> <button type="button" id="sign-out">Sign out</button></span></header>
<section id="signin" hidden>
<h2>Sign in with the admin credential</h2>
<p class="note">Every request this page makes is signed (AWS Signature Version 4) in the browser. The secret stays in this tab's memory; only the day's derived signing key is kept in session storage.</p>
<form id="signin-form" autocomplete="off">
<label>Access key id <input id="access-key" name="access-key" spellcheck="false"></label>
<label>Secret access key <input id="secret-key" name="secret-key" type="password"></label>
<label>Region <input id="region" name="region" value="us-east-1" spellcheck="false"></label>
<button type="submit" id="sign-in">Sign in</button>
</form>
<p id="signin-message" role="alert"></p>
</section>
<section id="app" hidden>
<div id="error" class="bad" role="alert" hidden></div>
<nav id="pickers">
<label>Pool <select id="pool"></select></label>
<label>Identity <select id="identity"></select></label>
<label>Dataset <select id="dataset"></select></label>
<span id="streams-note" class="note"></span>
</nav>
<div id="main" hidden>
<h2 id="stream-name"></h2>
<section id="status-box"><h3>Integrity <button type="button" id="refresh-status" class="small">verify again</button></h3><div id="status"></div></section>
<div id="columns">
<section id="timeline-box">
<h3>Timeline</h3>
<div class="pager">
<button type="button" id="oldest">« Oldest</button><button type="button" id="older">‹ Older</button><button type="button" id="newer">Newer ›</button><button type="button" id="latest">Latest »</button>
<span id="page-info"></span>
<form id="jump-form"><label>Go to sync count <input id="jump" type="number" min="1"></label></form>
</div>
<table class="grid" id="timeline"><thead><tr><th>Sync count</th><th>Time</th><th>Author</th><th>Device</th><th>Changed keys</th><th></th></tr></thead><tbody id="timeline-rows"></tbody></table>
</section>
<section id="detail-box">
<form id="diff-form"><label>Diff from <input id="diff-from" type="number" min="0"></label> <label>to <input id="diff-to" type="number" min="0"></label> <button type="submit" id="diff-go">Diff</button></form>
<form id="asof-form"><label>Dataset as of sync count <input id="asof" type="number" min="0"></label> <button type="submit" id="asof-go">Show</button></form>
<h3 id="detail-title"></h3>
<div id="detail"></div>
</section>
</div>
</div>
</section>
<script>SCRIPT</script>
</body>
</html>
"""#

    static let style = #"""
:root { font: 14px/1.4 system-ui, sans-serif; color: #1d2330; background: #f6f7f9; }
body { margin: 0; }
header { display: flex; justify-content: space-between; align-items: center; padding: 8px 16px; background: #1d2330; color: #fff; }
header h1 { font-size: 17px; margin: 0; }
section, nav { margin: 12px 16px; }
h2 { font-size: 16px; margin: 8px 0; } h3 { font-size: 14px; margin: 8px 0; }
label { margin-right: 12px; }
input, select, button { font: inherit; }
#signin-form label { display: block; margin: 6px 0; }
#signin-form input { width: 28em; }
button { cursor: pointer; border: 1px solid #aab; background: #fff; border-radius: 4px; padding: 2px 8px; margin-right: 4px; }
button:disabled { opacity: .4; cursor: default; }
button.small { font-size: 12px; padding: 0 6px; }
button.key { font-family: ui-monospace, monospace; font-size: 12px; margin: 1px 3px 1px 0; padding: 0 5px; }
button.op-put { border-color: #3a7; } button.op-remove { border-color: #c55; text-decoration: line-through; } button.op-erased { border-color: #a7a; font-style: italic; }
#columns { display: flex; gap: 16px; align-items: flex-start; }
#timeline-box { flex: 1; margin: 0; } #detail-box { flex: 1; margin: 0; min-width: 0; }
table.grid { border-collapse: collapse; width: 100%; background: #fff; }
table.grid th, table.grid td { border-bottom: 1px solid #e3e5ea; padding: 3px 6px; text-align: left; vertical-align: top; }
table.grid th { background: #eceef2; font-weight: 600; position: sticky; top: 0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } td.time { white-space: nowrap; }
td.val, td.key { font-family: ui-monospace, monospace; overflow-wrap: anywhere; white-space: pre-wrap; }
td.key { min-width: 6em; } #detail { overflow-x: auto; }
.erased { color: #7a3d7a; font-style: italic; background: #f3e8f3; padding: 0 4px; border-radius: 3px; }
.removed { color: #a33; font-style: italic; }
.note { color: #667; font-size: 12px; }
.ok { color: #16733a; } .bad { color: #b3261e; }
#error { background: #fde8e6; padding: 6px 10px; border-radius: 4px; }
.refused { color: #b3261e; font-weight: 600; }
.pager { margin-bottom: 6px; } .pager form { display: inline; margin-left: 12px; }
#detail-box form { margin-bottom: 6px; }
dl.digest { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 4px 0; }
dl.digest dt { color: #556; } dl.digest dd { margin: 0; }
.mono { font-family: ui-monospace, monospace; font-size: 12px; word-break: break-all; }
tr.added td.op { color: #16733a; } tr.removed td.op { color: #b3261e; } tr.changed td.op { color: #a66b00; }
"""#
}
