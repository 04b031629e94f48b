/// The history browser's script, part 1: the SigV4 signer (WebCrypto), signed GETs and sign-in.
/// Data goes into the page only as text (`textContent`), never as markup.
extension HistoryPage {
    static let scriptCore = #"""
'use strict';
// SyncLedger history browser. Every request to the server is signed with SigV4 (WebCrypto);
// every piece of data is put in the page as text (textContent), never as markup.
const UI = (() => {
  const enc = new TextEncoder();
  const SERVICE = 'cognito-sync';
  const STORE = 'syncledger-history-ui';
  let secret = null; // in memory only; sessionStorage keeps the day's derived signing key
  let session = null; // {accessKeyId, region, day, key (hex)}

  const $ = (id) => document.getElementById(id);
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function show(id, visible) { $(id).hidden = !visible; }
  function hex(bytes) { return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, '0')).join(''); }
  function unhex(text) { const out = new Uint8Array(text.length / 2); for (let i = 0; i < out.length; i++) out[i] = parseInt(text.substr(i * 2, 2), 16); return out; }
  async function sha256Hex(text) { return hex(await crypto.subtle.digest('SHA-256', enc.encode(text))); }
  async function hmac(key, text) {
    const k = await crypto.subtle.importKey('raw', key, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
    return new Uint8Array(await crypto.subtle.sign('HMAC', k, enc.encode(text)));
  }
  // RFC 3986: every byte but the unreserved ones percent-encoded, as the server's canonical form.
  function uriEncode(text) {
    return encodeURIComponent(text).replace(/[!'()*]/g, (c) => '%' + c.charCodeAt(0).toString(16).toUpperCase());
  }
  function amzDate(now) { return now.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, ''); }
  async function signingKey(secretText, day, region) {
    let key = await hmac(enc.encode('AWS4' + secretText), day);
    key = await hmac(key, region);
    key = await hmac(key, SERVICE);
    return hmac(key, 'aws4_request');
  }
  function saveSession() { sessionStorage.setItem(STORE, JSON.stringify(session)); }
  function loadSession() {
    try { session = JSON.parse(sessionStorage.getItem(STORE) || 'null'); } catch (e) { session = null; }
    return session;
  }
  function forget() { secret = null; session = null; sessionStorage.removeItem(STORE); }

  // The day's signing key: derived again from the secret on a new day, or sign in again.
  async function currentKey(day) {
    if (session && session.day === day) return unhex(session.key);
    if (!secret || !session) throw new SignInNeeded();
    session.key = hex(await signingKey(secret, day, session.region));
    session.day = day;
    saveSession();
    return unhex(session.key);
  }
  class SignInNeeded extends Error { constructor() { super('sign in again'); } }
  class HTTPError extends Error {
    constructor(status, type, message) { super(message); this.status = status; this.type = type; }
  }

  // GET /admin/ui/<op>?params, signed with SigV4 (host and x-amz-date signed, empty payload).
  async function get(op, params) {
    const path = '/admin/ui/' + op;
    const pairs = Object.entries(params || {})
      .filter(([, v]) => v !== undefined && v !== null && v !== '')
      .map(([k, v]) => [uriEncode(k), uriEncode(String(v))])
      .sort((a, b) => (a[0] === b[0] ? (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0) : (a[0] < b[0] ? -1 : 1)));
    const query = pairs.map(([k, v]) => k + '=' + v).join('&');
    const date = amzDate(new Date());
    const day = date.slice(0, 8);
    const key = await currentKey(day);
    const payloadHash = await sha256Hex('');
    const canonical = ['GET', path, query, 'host:' + location.host, 'x-amz-date:' + date, '', 'host;x-amz-date', payloadHash].join('\n');
    const scope = day + '/' + session.region + '/' + SERVICE + '/aws4_request';
    const toSign = ['AWS4-HMAC-SHA256', date, scope, await sha256Hex(canonical)].join('\n');
    const signature = hex(await hmac(key, toSign));
    const response = await fetch(path + (query ? '?' + query : ''), {
      method: 'GET', cache: 'no-store', credentials: 'omit',
      headers: {
        'x-amz-date': date,
        'authorization': 'AWS4-HMAC-SHA256 Credential=' + session.accessKeyId + '/' + scope + ', SignedHeaders=host;x-amz-date, Signature=' + signature,
      },
    });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) {
      throw new HTTPError(response.status, (body && (body.__type || body.code)) || response.headers.get('x-amzn-ErrorType') || 'Error',
        (body && (body.message || body.Message)) || ('HTTP ' + response.status));
    }
    return body;
  }

  function fail(error) {
    if (error instanceof SignInNeeded) { signOut('Your session ended: sign in again.'); return; }
    const banner = clear($('error'));
    banner.appendChild(el('strong', null, error instanceof HTTPError ? 'The server refused (' + error.status + '): ' : 'Error: '));
    banner.appendChild(el('span', null, error.message));
    show('error', true);
  }
  function clearError() { show('error', false); clear($('error')); }

  // Sign-in: the key is checked with a status request before anything else is shown.
  async function signIn(event) {
    event.preventDefault();
    const accessKeyId = $('access-key').value.trim();
    const secretText = $('secret-key').value;
    const region = $('region').value.trim() || 'us-east-1';
    const message = clear($('signin-message'));
    if (!accessKeyId || !secretText) { message.textContent = 'Enter the admin access key id and secret.'; return; }
    const day = amzDate(new Date()).slice(0, 8);
    secret = secretText;
    session = { accessKeyId, region, day, key: hex(await signingKey(secretText, day, region)) };
    $('secret-key').value = '';
    try {
      await get('status', {});
    } catch (error) {
      forget();
      if (error instanceof HTTPError && error.status === 403) {
        message.textContent = 'This credential cannot open the history browser: it is not the admin (developer) credential. ' + error.message;
      } else if (error instanceof HTTPError && error.status === 401) {
        message.textContent = 'Sign-in failed: the access key or the secret is wrong. ' + error.message;
      } else {
        message.textContent = 'Sign-in failed: ' + error.message;
      }
      message.className = 'refused';
      return;
    }
    saveSession();
    await enter();
  }

  function signOut(note) {
    forget();
    show('app', false);
    show('signed-in', false);
    show('signin', true);
    const message = clear($('signin-message'));
    if (typeof note === 'string') message.textContent = note;
  }

  async function enter() {
    show('signin', false);
    show('app', true);
    show('signed-in', true);
    $('who').textContent = session.accessKeyId;
    clearError();
    try {
      await Views.loadPools(new URLSearchParams(location.hash.slice(1)));
    } catch (error) { fail(error); }
  }

  function start() {
    $('signin-form').addEventListener('submit', (event) => { signIn(event).catch(fail); });
    $('sign-out').addEventListener('click', () => signOut('Signed out.'));
    if (loadSession() && session.day === amzDate(new Date()).slice(0, 8)) { enter(); } else { forget(); show('signin', true); }
  }

  return { $, el, clear, show, get, fail, clearError, start, HTTPError };
})();
"""#
}
