/// The history browser's script, part 2: the pickers, the paged timeline, a record's history, the
/// diff, the dataset as of a point and the integrity status.
extension HistoryPage {
    static let scriptViews = #"""
// The pickers, the timeline and the panels (a record's history, a diff, the dataset as of a point, status).
const Views = (() => {
  const { $, el, clear, show, get, fail, clearError } = UI;
  const PAGE = 100;
  let stream = null; // {pool, identity, dataset}
  let head = 0;
  let from = 1;
  let last = 0;
  let streams = [];

  function time(ms) { return new Date(ms).toISOString().replace('T', ' ').replace('Z', ' UTC'); }
  function option(value, text) { const o = el('option', null, text); o.value = value; return o; }
  function button(text, cls, onClick) {
    const b = el('button', cls, text);
    b.type = 'button';
    b.addEventListener('click', () => { clearError(); Promise.resolve(onClick()).catch(fail); });
    return b;
  }
  function cell(row, text, cls) { const td = el('td', cls, text); row.appendChild(td); return td; }
  // A value as a person should read it: erased, removed, or the text itself (never markup).
  function valueNode(value, erased, truncated, removedText) {
    if (erased) return el('span', 'erased', 'erased');
    if (value === undefined || value === null) return el('span', 'removed', removedText || 'removed');
    const span = el('span', 'value', value);
    if (truncated) span.appendChild(el('span', 'note', ' … (cut at 2048 characters)'));
    return span;
  }
  function params(extra) { return Object.assign({ pool: stream.pool, identity: stream.identity, dataset: stream.dataset }, extra || {}); }
  function remember() {
    const hash = new URLSearchParams({ pool: stream.pool, identity: stream.identity, dataset: stream.dataset }).toString();
    history.replaceState(null, '', location.pathname + location.search + '#' + hash);
  }

  async function loadPools(wanted) {
    const { Pools } = await get('pools', {});
    const select = clear($('pool'));
    select.appendChild(option('', Pools.length ? 'Choose a pool' : 'No pool has data'));
    for (const pool of Pools) select.appendChild(option(pool, pool));
    select.onchange = () => { loadStreams(select.value).catch(fail); };
    $('identity').onchange = () => fillDatasets();
    $('dataset').onchange = () => { openStream().catch(fail); };
    const pool = wanted && wanted.get('pool');
    if (pool && Pools.includes(pool)) {
      select.value = pool;
      await loadStreams(pool, wanted.get('identity'), wanted.get('dataset'));
    }
  }

  async function loadStreams(pool, identity, dataset) {
    show('main', false);
    if (!pool) return;
    const answer = await get('streams', { pool });
    streams = answer.Streams;
    $('streams-note').textContent = answer.More ? 'The first 500 datasets of this pool are listed.' : '';
    const identities = [...new Set(streams.map((s) => s.IdentityId))];
    const select = clear($('identity'));
    select.appendChild(option('', 'Choose an identity'));
    for (const id of identities) select.appendChild(option(id, id));
    if (identity && identities.includes(identity)) select.value = identity;
    fillDatasets(dataset);
    if (dataset && $('dataset').value === dataset) await openStream();
  }

  function fillDatasets(dataset) {
    const identity = $('identity').value;
    const select = clear($('dataset'));
    select.appendChild(option('', 'Choose a dataset'));
    for (const s of streams.filter((s) => s.IdentityId === identity)) {
      select.appendChild(option(s.DatasetName, s.DatasetName + ' (' + s.SyncCount + ' entries)'));
    }
    if (dataset) select.value = dataset;
  }

  async function openStream() {
    const dataset = $('dataset').value;
    if (!dataset) { show('main', false); return; }
    stream = { pool: $('pool').value, identity: $('identity').value, dataset };
    remember();
    $('stream-name').textContent = stream.pool + ' / ' + stream.identity + ' / ' + stream.dataset;
    show('main', true);
    clear($('detail'));
    $('detail-title').textContent = 'Choose a key, an entry or a diff';
    await Promise.all([loadPage(null), loadStatus()]);
  }

  // One page of the timeline: `start` is the first sync count (null: the latest page).
  async function loadPage(start, limit) {
    const answer = await get('entries', params({ from: start === null ? undefined : Math.max(1, start), limit: limit || PAGE }));
    head = answer.Head;
    from = answer.From;
    const body = clear($('timeline-rows'));
    for (const entry of answer.Entries.slice().reverse()) body.appendChild(entryRow(entry));
    last = answer.Entries.length ? answer.Entries[answer.Entries.length - 1].SyncCount : from;
    $('page-info').textContent = 'Sync counts ' + from + '–' + last + ' of ' + head;
    $('newer').disabled = last >= head;
    $('latest').disabled = last >= head;
    $('older').disabled = from <= 1;
    $('oldest').disabled = from <= 1;
    $('diff-to').value = $('diff-to').value || head;
    $('diff-from').value = $('diff-from').value || Math.max(0, head - 1);
    performance.mark('timeline:' + from);
    document.body.dataset.timelineFrom = String(from);
  }

  function entryRow(entry) {
    const row = el('tr', 'entry');
    row.dataset.syncCount = String(entry.SyncCount);
    cell(row, entry.SyncCount, 'num');
    cell(row, time(entry.Time), 'time');
    cell(row, entry.Author, 'author');
    cell(row, entry.Device || '—', 'device');
    const changes = cell(row, null, 'changes');
    for (const change of entry.Changes) {
      if (change.Op === 'deleteDataset') { changes.appendChild(el('span', 'op-delete', 'dataset deleted')); continue; }
      const b = button(change.Key, 'key op-' + change.Op, () => loadRecord(change.Key));
      b.title = change.Op + ' ' + change.Key;
      changes.appendChild(b);
    }
    if (entry.MoreChanges) changes.appendChild(el('span', 'note', '+' + entry.MoreChanges + ' more'));
    const actions = cell(row, null, 'actions');
    actions.appendChild(button('as of', 'small as-of', () => loadDataset(entry.SyncCount)));
    actions.appendChild(button('diff', 'small diff', () => loadDiff(entry.SyncCount - 1, entry.SyncCount)));
    return row;
  }

  function table(headers) {
    const t = el('table', 'grid');
    const tr = el('tr');
    for (const h of headers) tr.appendChild(el('th', null, h));
    const thead = el('thead'); thead.appendChild(tr); t.appendChild(thead);
    const tbody = el('tbody'); t.appendChild(tbody);
    return [t, tbody];
  }
  function setDetail(title, node, kind) {
    $('detail-title').textContent = title;
    const detail = clear($('detail'));
    detail.dataset.kind = kind;
    detail.appendChild(node);
  }

  async function loadRecord(key) {
    const answer = await get('record', params({ key }));
    const [t, body] = table(['Sync count', 'Time', 'Author', 'Device', 'Change', 'Value']);
    for (const c of answer.Changes) {
      const row = el('tr', 'change');
      cell(row, c.SyncCount, 'num'); cell(row, time(c.Time), 'time'); cell(row, c.Author); cell(row, c.Device || '—');
      cell(row, c.Op === 'deleteDataset' ? 'dataset deleted' : c.Op, 'op');
      cell(row, null, 'val').appendChild(c.Op === 'put' ? valueNode(c.Value, false, c.ValueTruncated) : valueNode(null, c.Erased, false, c.Op === 'deleteDataset' ? 'deleted' : 'removed'));
      body.appendChild(row);
    }
    const wrap = el('div');
    wrap.appendChild(t);
    if (answer.More) wrap.appendChild(el('p', 'note', 'The first 200 changes are shown.'));
    setDetail('History of record “' + key + '”', wrap, 'record');
  }

  async function loadDataset(syncCount) {
    const answer = await get('dataset', params({ syncCount }));
    const [t, body] = table(['Key', 'Value', 'Set at', 'Time', 'Author', 'Device']);
    for (const r of answer.Records) {
      const row = el('tr', 'record');
      cell(row, r.Key, 'key');
      cell(row, null, 'val').appendChild(valueNode(r.Value, r.Erased, r.ValueTruncated));
      cell(row, r.SyncCount, 'num'); cell(row, time(r.Time), 'time'); cell(row, r.Author); cell(row, r.Device || '—');
      body.appendChild(row);
    }
    const wrap = el('div');
    if (answer.Deleted) wrap.appendChild(el('p', 'note', 'The dataset was deleted at this point.'));
    wrap.appendChild(t);
    if (!answer.Records.length) wrap.appendChild(el('p', 'note', 'No records.'));
    setDetail('Dataset as of sync count ' + answer.SyncCount + ' (head ' + answer.Head + ')', wrap, 'dataset');
  }

  async function loadDiff(a, b) {
    const answer = await get('diff', params({ from: a, to: b }));
    const [t, body] = table(['Key', 'Change', 'Before', 'After', 'Set at', 'Author', 'Device']);
    for (const d of answer.Lines) {
      const row = el('tr', 'diff-line ' + d.Change);
      cell(row, d.Key, 'key'); cell(row, d.Change, 'op');
      cell(row, null, 'val before').appendChild(valueNode(d.Before, d.BeforeErased, d.BeforeTruncated, 'none'));
      cell(row, null, 'val after').appendChild(valueNode(d.After, d.AfterErased, d.AfterTruncated, 'none'));
      cell(row, d.SyncCount, 'num'); cell(row, d.Author); cell(row, d.Device || '—');
      body.appendChild(row);
    }
    const wrap = el('div');
    wrap.appendChild(t);
    if (!answer.Lines.length) wrap.appendChild(el('p', 'note', 'No record differs.'));
    setDetail('Diff from sync count ' + answer.From + ' to ' + answer.To, wrap, 'diff');
  }

  async function loadStatus() {
    const box = clear($('status'));
    box.appendChild(el('p', 'note', 'Verifying…'));
    const s = await get('status', params());
    clear(box);
    const v = s.Verify;
    const verdict = el('p', v.Valid ? 'ok verify' : 'bad verify',
      v.Valid ? 'Verified: ' + v.Entries + ' entries of this dataset, hash chain and views intact (' + v.Milliseconds + ' ms).'
        : 'Verification FAILED at sync count ' + (v.Offset || '?') + ': ' + v.Problem);
    box.appendChild(verdict);
    const d = s.Digest;
    const dl = el('dl', 'digest');
    const add = (k, val, cls) => { dl.appendChild(el('dt', null, k)); dl.appendChild(el('dd', cls, val)); };
    add('Signed digest', d.SignatureValid ? 'signature valid (Ed25519, key ' + d.KeyId + ')' : 'signature INVALID', d.SignatureValid ? 'ok' : 'bad');
    add('Tree size', d.TreeSize + ' log entries');
    add('Root hash', d.RootHash, 'mono root-hash');
    add('Signed at', time(d.Time));
    add('Ledger', d.LedgerId, 'mono');
    box.appendChild(dl);
  }

  function start() {
    $('oldest').addEventListener('click', () => loadPage(1).catch(fail));
    $('older').addEventListener('click', () => { const start = Math.max(1, from - PAGE); loadPage(start, from - start).catch(fail); });
    $('newer').addEventListener('click', () => loadPage(last + 1).catch(fail));
    $('latest').addEventListener('click', () => loadPage(null).catch(fail));
    $('jump-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const n = parseInt($('jump').value, 10);
      if (n > 0) loadPage(Math.max(1, n - PAGE + 1)).catch(fail);
    });
    $('diff-form').addEventListener('submit', (event) => {
      event.preventDefault();
      clearError();
      loadDiff(parseInt($('diff-from').value, 10), parseInt($('diff-to').value, 10)).catch(fail);
    });
    $('asof-form').addEventListener('submit', (event) => {
      event.preventDefault();
      clearError();
      loadDataset(parseInt($('asof').value, 10)).catch(fail);
    });
    $('refresh-status').addEventListener('click', () => loadStatus().catch(fail));
  }

  return { loadPools, start };
})();

document.addEventListener('DOMContentLoaded', () => { Views.start(); UI.start(); });
"""#
}
