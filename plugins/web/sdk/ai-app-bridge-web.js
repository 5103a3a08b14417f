/*
 * aab Web SDK — connects a page to the aab Web provider over `aab.web/v2`.
 *
 * Plain JavaScript, no build step: load it with a <script> tag (it defines
 * `window.AiAppBridgeWeb`) or require() it. One call does everything:
 *
 *   const bridge = AiAppBridgeWeb.createAiAppBridge({ endpoint, token, appName });
 *   bridge.start();
 *
 * What it owns, page side: the WebSocket client (hello, binding echo, reconnect
 * with backoff), the DOM snapshot renderer (per-document element identity), the
 * action executor (one action at a time, identity/geometry/occlusion rechecked in
 * the final turn, completions kept in localStorage until the host acknowledges
 * them), and capture (console, errors, fetch, XHR, UI events, app records) with
 * per-stream sequences, a bounded queue and capture barriers.
 *
 * Password-like values never leave the page: snapshots, input receipts and UI
 * events report only that a value is sensitive and its length.
 */
(function (root, factory) {
  'use strict';
  var api = factory(root);
  if (typeof module === 'object' && module && module.exports) module.exports = api;
  if (root) root.AiAppBridgeWeb = api;
})(typeof globalThis !== 'undefined' ? globalThis : this, function (root) {
  'use strict';

  var PROTOCOL = 'aab.web/v2';
  var EXECUTION_SCHEMA = 'aab.web-execution/v1';
  var DOM_TARGET_SCHEMA = 'aab.web-dom-target/v1';
  var CAPTURE_SCHEMA = 'aab.web-capture/v1';
  var OBSERVATION_SCHEMA = 'aab.ui-observation/v1';
  var TARGET_ID = 'main';
  var SESSION_STORAGE_KEY = 'ai_app_bridge_web_session_id';
  var JOURNAL_PREFIX = 'ai_app_bridge_web_journal:';

  var LIMITS = {
    message: 256 * 1024,
    record: 124 * 1024,
    queueRecords: 100,
    queueBytes: 1024 * 1024,
    queueTtlMs: 60000,
    inflightRecords: 1000,
    inflightBytes: 4 * 1024 * 1024,
    completion: 64 * 1024,
    bodyText: 20000,
    maxControls: 1000,
    defaultControls: 150,
    text: 300,
    href: 500,
    value: 300,
    scan: 1000,
    body: 12000,
    logMessage: 4000,
    actions: 128,
    stateProviders: 128,
    uiBatchMs: 250,
    uiBatchEvents: 200,
    candidates: 10,
    observationMinMs: 100,
    observationMaxMs: 5000,
    observationIntervalMs: 200
  };

  var CONTROL_QUERY = 'a,button,input,textarea,select,[contenteditable="true"],[role],[onclick],[aria-label]';
  var TEXT_INPUT_TYPES = ['text', 'search', 'url', 'tel', 'email', 'password', 'number'];
  var SENSITIVE = /password|passwd|pwd|passcode|one-time-code|cc-number|cc-csc/i;
  var CHECKABLE_ROLES = ['checkbox', 'menuitemcheckbox', 'radio', 'menuitemradio', 'switch', 'option', 'treeitem'];
  var MIXED_IS_FALSE = ['radio', 'menuitemradio', 'switch'];

  // ------------------------------------------------------------------ utilities

  function now() { return Date.now(); }

  function hex(bytes) {
    var out = '';
    for (var i = 0; i < bytes.length; i++) out += (bytes[i] < 16 ? '0' : '') + bytes[i].toString(16);
    return out;
  }

  function randomHex32() {
    var b = new Uint8Array(16);
    if (root.crypto && root.crypto.getRandomValues) root.crypto.getRandomValues(b);
    else for (var i = 0; i < 16; i++) b[i] = Math.floor(Math.random() * 256);
    return hex(b);
  }

  function clip(s, max) {
    s = s == null ? '' : String(s);
    return s.length > max ? s.slice(0, max) : s;
  }

  function collapse(s) { return String(s == null ? '' : s).replace(/\s+/g, ' ').trim(); }

  function byteLength(s) {
    if (typeof TextEncoder !== 'undefined') return new TextEncoder().encode(s).length;
    return unescape(encodeURIComponent(s)).length;
  }

  function safeStringify(v) {
    var seen = typeof WeakSet !== 'undefined' ? new WeakSet() : null;
    try {
      return JSON.stringify(v, function (k, x) {
        if (typeof x === 'bigint') return String(x);
        if (typeof x === 'function') return '[function]';
        if (x && typeof x === 'object') {
          if (seen) { if (seen.has(x)) return '[circular]'; seen.add(x); }
          if (typeof Element !== 'undefined' && x instanceof Element) return '<' + x.tagName.toLowerCase() + '>';
          if (x instanceof Error) return { name: x.name, message: x.message, stack: clip(x.stack, 2000) };
        }
        return x;
      });
    } catch (e) { return '"[unserialisable]"'; }
  }

  function formatArgs(args) {
    var parts = [];
    for (var i = 0; i < args.length; i++) {
      var a = args[i];
      parts.push(typeof a === 'string' ? a : (a instanceof Error ? (a.name + ': ' + a.message) : safeStringify(a)));
    }
    return clip(parts.join(' '), LIMITS.logMessage);
  }

  function jsonClone(v) {
    try { return JSON.parse(safeStringify(v === undefined ? null : v)); } catch (e) { return null; }
  }

  function sameJson(a, b) { return safeStringify(a) === safeStringify(b); }

  function storage(kind) {
    try { var s = root[kind]; var k = '__aab_probe__'; s.setItem(k, '1'); s.removeItem(k); return s; } catch (e) { return null; }
  }

  function currentRoute() {
    try { return clip(location.pathname + location.search + location.hash, 4096); } catch (e) { return ''; }
  }

  function currentUrl() { try { return location.href; } catch (e) { return ''; } }

  // ------------------------------------------------------------------ document identity
  // One identity state per document, shared by every bridge instance: element ids
  // (`e<n>`, tied to the node through a WeakMap) and the navigation id, which
  // changes on every history transition so earlier observations become stale.

  var doc = root.__aabWebDocumentV2;
  if (!doc && typeof document !== 'undefined') {
    doc = { seq: 0, ids: new WeakMap(), nodes: new Map(), navigationId: randomHex32(), listeners: [] };
    try { Object.defineProperty(root, '__aabWebDocumentV2', { value: doc, enumerable: false }); } catch (e) { root.__aabWebDocumentV2 = doc; }
    var bump = function (reason) {
      doc.navigationId = randomHex32();
      for (var i = 0; i < doc.listeners.length; i++) { try { doc.listeners[i](reason); } catch (e) { /* a listener's failure must not break navigation */ } }
    };
    ['pushState', 'replaceState'].forEach(function (name) {
      var original = history[name];
      if (typeof original !== 'function') return;
      history[name] = function () {
        var r = original.apply(this, arguments);
        bump(name);
        return r;
      };
    });
    ['popstate', 'hashchange', 'pageshow', 'pagehide'].forEach(function (type) {
      root.addEventListener(type, function () { bump(type); }, true);
    });
  }

  function elementIdOf(el) {
    var id = doc.ids.get(el);
    if (!id) {
      doc.seq += 1;
      id = 'e' + doc.seq;
      doc.ids.set(el, id);
      doc.nodes.set(id, typeof WeakRef !== 'undefined' ? new WeakRef(el) : { deref: function () { return el; } });
    }
    return id;
  }

  function elementById(id) {
    var ref = doc.nodes.get(id);
    var el = ref && ref.deref();
    if (!el) { doc.nodes.delete(id); return null; }
    return el.isConnected ? el : null;
  }

  // ------------------------------------------------------------------ element description

  function tagOf(el) { return el.tagName ? el.tagName.toLowerCase() : ''; }

  function attr(el, name) { var v = el.getAttribute && el.getAttribute(name); return v == null ? null : v; }

  function isSensitive(el) {
    if (tagOf(el) !== 'input' && tagOf(el) !== 'textarea') return false;
    var t = (attr(el, 'type') || '').toLowerCase();
    if (t === 'password') return true;
    return SENSITIVE.test(attr(el, 'id') || '') || SENSITIVE.test(attr(el, 'name') || '') || SENSITIVE.test(attr(el, 'autocomplete') || '');
  }

  function implicitRole(el) {
    var tag = tagOf(el);
    var type = (attr(el, 'type') || 'text').toLowerCase();
    if (tag === 'button') return 'button';
    if (tag === 'a' && el.hasAttribute('href')) return 'link';
    if (tag === 'select') return el.multiple ? 'listbox' : 'combobox';
    if (tag === 'textarea') return 'textbox';
    if (tag === 'input') {
      if (type === 'checkbox') return 'checkbox';
      if (type === 'radio') return 'radio';
      if (type === 'button' || type === 'submit' || type === 'reset' || type === 'image') return 'button';
      if (type === 'range') return 'slider';
      if (type === 'search') return 'searchbox';
      if (TEXT_INPUT_TYPES.indexOf(type) >= 0) return type === 'number' ? 'spinbutton' : 'textbox';
    }
    return null;
  }

  function roleOf(el) { return attr(el, 'role') || implicitRole(el); }

  function labelText(el) {
    try {
      if (el.labels && el.labels.length) {
        var label = el.labels[0];
        var text = collapse(label.innerText || label.textContent);
        // A wrapping label also contains the control's own text (select options).
        var own = label.contains(el) ? collapse(el.innerText || el.textContent) : '';
        if (own && text.indexOf(own) >= 0) text = collapse(text.replace(own, ' '));
        return text;
      }
    } catch (e) { /* detached labels */ }
    return '';
  }

  function isTextEntry(el) {
    var tag = tagOf(el);
    if (tag === 'textarea') return true;
    if (tag === 'input') return TEXT_INPUT_TYPES.indexOf((attr(el, 'type') || 'text').toLowerCase()) >= 0;
    return !!el.isContentEditable;
  }

  // Text is part of element identity, so it must not follow what the user types:
  // text-entry controls are named by their label, never by their value.
  function textOf(el) {
    var tag = tagOf(el);
    if (isSensitive(el)) return clip(attr(el, 'aria-label') || attr(el, 'placeholder') || '', LIMITS.text);
    if (tag === 'input') {
      var type = (attr(el, 'type') || 'text').toLowerCase();
      if (type === 'button' || type === 'submit' || type === 'reset') return clip(collapse(el.value), LIMITS.text);
      return clip(labelText(el), LIMITS.text);
    }
    if (tag === 'textarea' || tag === 'select' || el.isContentEditable) return clip(labelText(el) || attr(el, 'aria-label') || '', LIMITS.text);
    return clip(collapse(el.innerText != null ? el.innerText : el.textContent), LIMITS.text);
  }

  function isDisabled(el) {
    try {
      if (el.disabled === true) return true;
      if (el.matches && el.matches(':disabled')) return true;
      if (attr(el, 'aria-disabled') === 'true') return true;
      if (el.closest && el.closest('[inert]')) return true;
    } catch (e) { /* exotic elements */ }
    return false;
  }

  function isVisible(el) {
    if (!el.isConnected) return false;
    var rect = el.getBoundingClientRect();
    if (rect.width <= 0 || rect.height <= 0) return false;
    if (typeof el.checkVisibility === 'function') {
      return el.checkVisibility({ opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true });
    }
    for (var n = el; n && n.nodeType === 1; n = n.parentElement) {
      var s = getComputedStyle(n);
      if (s.display === 'none' || s.visibility === 'hidden' || s.visibility === 'collapse' || parseFloat(s.opacity) === 0) return false;
    }
    return true;
  }

  function isEditable(el) {
    if (isDisabled(el)) return false;
    if (el.isContentEditable) return true;
    if (!isTextEntry(el)) return false;
    return !el.readOnly;
  }

  function checkedOf(el) {
    var tag = tagOf(el);
    var type = (attr(el, 'type') || '').toLowerCase();
    if (tag === 'input' && (type === 'checkbox' || type === 'radio')) {
      if (type === 'checkbox' && el.indeterminate) return 'mixed';
      return !!el.checked;
    }
    var role = attr(el, 'role');
    if (!role || CHECKABLE_ROLES.indexOf(role) < 0) return null;
    var raw = attr(el, 'aria-checked');
    if (raw === 'true') return true;
    if (raw === 'false') return false;
    if (raw === 'mixed') return MIXED_IS_FALSE.indexOf(role) >= 0 ? false : 'mixed';
    return null;
  }

  function rectOf(el) {
    var r = el.getBoundingClientRect();
    return { x: Math.round(r.left * 10) / 10, y: Math.round(r.top * 10) / 10, width: Math.round(r.width * 10) / 10, height: Math.round(r.height * 10) / 10 };
  }

  function hitOf(hit) {
    if (!hit) return null;
    var id = hit.id || null;
    return { tag: tagOf(hit), id: id, elementId: doc.ids.get(hit) || null, text: clip(collapse(hit.innerText || hit.textContent), 80) };
  }

  // Interaction readiness: hidden / disabled / outside-viewport, else the element at
  // the clipped centre decides between ready and obscured.
  function interactionOf(el, visible, disabled) {
    if (!visible) return { status: 'hidden' };
    if (disabled) return { status: 'disabled' };
    var r = el.getBoundingClientRect();
    var vw = root.innerWidth || document.documentElement.clientWidth;
    var vh = root.innerHeight || document.documentElement.clientHeight;
    var left = Math.max(r.left, 0), right = Math.min(r.right, vw), top = Math.max(r.top, 0), bottom = Math.min(r.bottom, vh);
    if (right <= left || bottom <= top) return { status: 'outside-viewport' };
    var point = { x: Math.round((left + right) / 2), y: Math.round((top + bottom) / 2) };
    var hit = document.elementFromPoint(point.x, point.y);
    if (hit && (hit === el || el.contains(hit))) return { status: 'ready', point: point };
    return { status: 'obscured', point: point, hit: hitOf(hit) };
  }

  function identityOf(el) {
    return {
      elementId: elementIdOf(el),
      tag: tagOf(el),
      id: attr(el, 'id'),
      name: attr(el, 'name'),
      type: attr(el, 'type'),
      role: roleOf(el),
      ariaLabel: attr(el, 'aria-label'),
      placeholder: attr(el, 'placeholder'),
      href: attr(el, 'href') == null ? null : clip(attr(el, 'href'), LIMITS.href),
      text: textOf(el)
    };
  }

  function describe(el, index) {
    var c = identityOf(el);
    var visible = isVisible(el);
    var disabled = isDisabled(el);
    var sensitive = isSensitive(el);
    c.index = index;
    c.sensitive = sensitive;
    if (sensitive) c.valueLength = String(el.value || '').length;
    else if (tagOf(el) === 'input' || tagOf(el) === 'textarea' || tagOf(el) === 'select') {
      var type = (attr(el, 'type') || '').toLowerCase();
      if (type !== 'checkbox' && type !== 'radio' && type !== 'file') c.value = clip(el.value, LIMITS.value);
    }
    c.disabled = disabled;
    c.visible = visible;
    c.editable = isEditable(el);
    c.checked = checkedOf(el);
    c.ariaChecked = attr(el, 'aria-checked');
    c.interaction = interactionOf(el, visible, disabled);
    c.bounds = rectOf(el);
    return c;
  }

  // Assign through the prototype's setter: frameworks that track the value
  // property (React and the like) then see the change as a user edit.
  function setNativeValue(el, value) {
    var proto = tagOf(el) === 'textarea' ? root.HTMLTextAreaElement.prototype : root.HTMLInputElement.prototype;
    var desc = Object.getOwnPropertyDescriptor(proto, 'value');
    if (desc && desc.set) desc.set.call(el, value); else el.value = value;
  }

  // ------------------------------------------------------------------ mobile H5 renderer
  // The renderer the mobile SDKs run inside a WebView page (one request per
  // evaluation): `h5Render({operation, seed, errorPrefix, payload?, geometry?})`.
  // It describes the page with the same element identity, visibility, disabled,
  // editable and interaction code as the Web snapshot above, but in the mobile
  // control shape (string identity fields, no role/placeholder/checked), and it
  // keeps its own per-document state (documentId = seed, `seed:<generation>`
  // after every history transition, suspended on pagehide) in a hidden window
  // property so a stale page reference is refused with `reobserve_required`.
  //
  // Click and input run in two evaluations: `prepare` checks the element and
  // returns its geometry (x/y = the CSS point the native side hit-tests, width/
  // height = the CSS viewport, scrollX/scrollY, bounds = the element's rect); the
  // final `action` recomputes the geometry and acts only when it is identical.

  var H5_STATE_KEYS = { android_h5_: '__aabAndroidH5TargetV1', ios_h5_: '__aabIOSH5TargetV1', flutter_h5_: '__aabFlutterH5TargetV1', web_executor_: '__aabWebExecutorTargetV1' };
  var H5_LIMITS = { controls: 1000, scan: 5000, text: 500, value: 500, bodyText: 20000, title: 1024 };
  var H5_IDENTITY_KEYS = ['elementId', 'tag', 'id', 'name', 'type', 'text', 'ariaLabel', 'href'];

  function h5Fail(code, dispatched, extra) {
    var r = { ok: false, error: code, message: 'WebView execution rejected: ' + code, dispatched: !!dispatched, ambiguous: false };
    if (extra) for (var k in extra) r[k] = extra[k];
    return r;
  }

  function h5Str(v) { return v == null ? '' : String(v); }

  // Mobile text is the element's own rendered text, never a typed value: empty
  // for text-entry controls and for anything password-like.
  function h5TextOf(el) {
    if (isSensitive(el)) return '';
    return clip(collapse(el.innerText != null ? el.innerText : el.textContent), H5_LIMITS.text);
  }

  function h5ValueOf(el) {
    var tag = tagOf(el);
    if (tag !== 'input' && tag !== 'textarea' && tag !== 'select') return '';
    if (isSensitive(el)) return '[REDACTED]';
    return clip(h5Str(el.value), H5_LIMITS.value);
  }

  function h5IdentityOf(el) {
    var c = identityOf(el);
    return { elementId: c.elementId, tag: c.tag, id: h5Str(c.id), name: h5Str(c.name), type: h5Str(c.type), text: h5TextOf(el), ariaLabel: h5Str(c.ariaLabel), href: h5Str(c.href) };
  }

  function h5Describe(el) {
    var c = h5IdentityOf(el);
    var visible = isVisible(el);
    var disabled = isDisabled(el);
    c.value = h5ValueOf(el);
    c.visible = visible;
    c.disabled = disabled;
    c.editable = isEditable(el);
    c.interaction = interactionOf(el, visible, disabled);
    c.bounds = rectOf(el);
    return c;
  }

  function h5Viewport() {
    return {
      width: root.innerWidth || document.documentElement.clientWidth,
      height: root.innerHeight || document.documentElement.clientHeight,
      scrollX: Math.round(root.scrollX),
      scrollY: Math.round(root.scrollY)
    };
  }

  // The live state of this document, or null when there is none (never
  // observed, another document, or suspended by pagehide).
  function h5State(key) {
    var s = root[key];
    if (!s || s.document !== document || s.suspended) return null;
    return s;
  }

  function h5Observe(key, seed) {
    var live = h5State(key);
    if (live) return live;
    var old = root[key];
    if (old && old.listener) doc.listeners = doc.listeners.filter(function (l) { return l !== old.listener; });
    var s = { seed: seed, generation: 0, documentId: seed, suspended: false, document: document, listener: null };
    var bump = function () { s.generation += 1; s.documentId = s.seed + ':' + s.generation; };
    s.listener = function (reason) {
      if (root[key] !== s) return;
      if (reason === 'pagehide') { s.suspended = true; return; }
      // pageshow counts only when the page comes back from the back/forward
      // cache (below): the first one follows the initial load and changes nothing.
      if (reason !== 'pageshow') bump();
    };
    doc.listeners.push(s.listener);
    root.addEventListener('pageshow', function (e) { if (root[key] === s && e.persisted) bump(); }, true);
    try { Object.defineProperty(root, key, { value: s, enumerable: false, configurable: true, writable: true }); } catch (e) { root[key] = s; }
    return s;
  }

  function h5Snapshot(s) {
    var list = document.querySelectorAll(CONTROL_QUERY);
    var controls = [];
    for (var i = 0; i < list.length && controls.length < H5_LIMITS.controls; i++) controls.push(h5Describe(list[i]));
    var body = document.body ? h5Str(document.body.innerText) : '';
    return {
      ok: true,
      dom: {
        documentId: s.documentId,
        url: currentUrl(),
        title: clip(document.title, H5_LIMITS.title),
        readyState: document.readyState,
        viewport: h5Viewport(),
        bodyText: body.length > H5_LIMITS.bodyText ? body.slice(0, H5_LIMITS.bodyText) : body,
        bodyTextTruncated: body.length > H5_LIMITS.bodyText,
        controlCount: list.length,
        truncated: list.length > H5_LIMITS.controls,
        controls: controls
      }
    };
  }

  // The one control carrying the observed elementId, with the observed identity.
  function h5Resolve(prefix, ref) {
    var list = document.querySelectorAll(CONTROL_QUERY);
    if (list.length > H5_LIMITS.scan) return h5Fail(prefix + 'target_scan_truncated', false, { controlCount: list.length });
    var found = [];
    for (var i = 0; i < list.length; i++) if (doc.ids.get(list[i]) === ref.elementId) found.push(list[i]);
    if (found.length !== 1) return h5Fail(prefix + 'target_changed');
    var identity = h5IdentityOf(found[0]);
    for (var k = 0; k < H5_IDENTITY_KEYS.length; k++) {
      var key = H5_IDENTITY_KEYS[k];
      if (identity[key] !== ref[key]) return h5Fail(prefix + 'target_changed', false, { field: key });
    }
    return { ok: true, element: found[0], identity: identity };
  }

  // Everything click/input need, checked again in the final turn. `resolve` finds
  // the observed element (default: among the controls; the executor also binds
  // elements a CSS query described).
  function h5Prepare(prefix, payload, resolve) {
    var r = (resolve || h5Resolve)(prefix, payload.element);
    if (!r.ok) return r;
    var el = r.element;
    var visible = isVisible(el), disabled = isDisabled(el);
    var unusable = payload.action === 'input' ? 'target_not_editable' : 'target_not_clickable';
    if (!visible || disabled) return h5Fail(prefix + unusable);
    if (payload.action === 'input' && !isEditable(el)) return h5Fail(prefix + 'target_not_editable');
    var interaction = interactionOf(el, visible, disabled);
    if (interaction.status === 'outside-viewport') return h5Fail(prefix + 'target_outside_viewport');
    if (interaction.status !== 'ready') return h5Fail(prefix + 'target_obscured', false, { interaction: interaction });
    var v = h5Viewport();
    var geometry = { x: interaction.point.x, y: interaction.point.y, width: v.width, height: v.height, scrollX: v.scrollX, scrollY: v.scrollY, bounds: rectOf(el) };
    return { ok: true, element: el, identity: r.identity, interaction: interaction, geometry: geometry };
  }

  function h5Eval(script) {
    var failed = function (e) { return h5Fail('h5_script_failed', true, { scriptError: clip(String(e && e.message || e), 2000) }); };
    var value;
    try { value = (0, eval)(script); } catch (e) { return failed(e); }
    var done = function (v) { return { ok: true, result: jsonClone(v), dispatched: true, ambiguous: false }; };
    if (value && typeof value.then === 'function') return Promise.resolve(value).then(done, failed);
    return done(value);
  }

  function h5Act(prefix, payload, geometry) {
    var prepared = h5Prepare(prefix, payload);
    if (!prepared.ok) return prepared;
    if (!sameJson(prepared.geometry, geometry)) return h5Fail(prefix + 'target_changed', false, { geometry: prepared.geometry });
    var el = prepared.element;
    if (payload.action === 'click') {
      el.click();
      return { ok: true, dispatched: true, ambiguous: false, action: 'click', element: prepared.identity, interaction: prepared.interaction, geometry: prepared.geometry };
    }
    // Input: focus first; focus handlers may rewrite the page, so check again.
    if (document.activeElement !== el) { try { el.focus({ preventScroll: true }); } catch (e) { el.focus(); } }
    var again = h5Prepare(prefix, payload);
    if (!again.ok || again.element !== el || !sameJson(again.geometry, geometry)) return h5Fail(prefix + 'target_changed', true);
    if (el.isContentEditable) el.innerText = payload.text;
    else setNativeValue(el, payload.text);
    el.dispatchEvent(new Event('input', { bubbles: true }));
    el.dispatchEvent(new Event('change', { bubbles: true }));
    var now = el.isContentEditable ? h5Str(el.innerText).replace(/\n$/, '') : h5Str(el.value);
    var out = { ok: true, dispatched: true, ambiguous: false, action: 'input', element: prepared.identity, geometry: prepared.geometry, sensitive: isSensitive(el), valueLength: now.length, accepted: now === payload.text };
    if (!out.sensitive) out.value = clip(now, H5_LIMITS.value);
    return out;
  }

  // ------------------------------------------------------------------ executor turns
  // `web-executor` drives pages that embed no SDK: its engine (CDP or WebDriver)
  // injects this file and evaluates further turns of the same renderer, with error
  // prefix `web_executor_`:
  //   document  the document's identity (documentId, url, title) without a snapshot;
  //   query     a CSS selector's matches, described like snapshot controls;
  //   match     a wait condition (selector matches, or body text);
  //   arm       the last check before the engine's own input events: the element
  //             must still have the prepared geometry; writes the action's ledger
  //             entry (`dispatching`) and a capture-phase listener that marks it
  //             `delivered` when the event reaches the bound element (focus and
  //             content selection for typing happen here too);
  //   ledger    an action's entry, read back to settle or reconcile it.
  // The ledger is kept in the document and in sessionStorage, so a delivery that
  // navigated the page (a link, a form) is still provable from the next document of
  // the same origin; an engine may also define the binding function
  // `__aabWebExecutorDelivered`, which learns of a delivery at once.

  var EXEC_PREFIX = 'web_executor_';
  var EXEC_LEDGER_KEY = '__aabWebExecutorLedgerV1';
  var EXEC_LEDGER_STORAGE = 'aab.web-executor.ledger.v1';
  var EXEC_LEDGER_MAX = 32;
  var EXEC_BINDING = '__aabWebExecutorDelivered';
  var EXEC_EVENTS = { click: ['click'], input: ['input'], key: ['keydown'], wheel: ['wheel'], scrollIntoView: [] };
  var EXEC_MATCHES = 20;

  function execLedger() {
    var l = root[EXEC_LEDGER_KEY];
    if (!l || l.document !== document) {
      l = { entries: {}, order: [], listener: null, document: document };
      try { Object.defineProperty(root, EXEC_LEDGER_KEY, { value: l, enumerable: false, configurable: true, writable: true }); } catch (e) { root[EXEC_LEDGER_KEY] = l; }
    }
    return l;
  }

  function execStored() {
    try {
      var s = root.sessionStorage;
      var v = s && s.getItem(EXEC_LEDGER_STORAGE);
      var o = v ? JSON.parse(v) : null;
      return o && typeof o === 'object' && !Array.isArray(o) ? o : {};
    } catch (e) { return {}; }
  }

  function execPut(entry) {
    var l = execLedger();
    if (!l.entries[entry.actionId]) l.order.push(entry.actionId);
    l.entries[entry.actionId] = entry;
    while (l.order.length > EXEC_LEDGER_MAX) delete l.entries[l.order.shift()];
    try {
      var s = root.sessionStorage;
      if (!s) return;
      var stored = execStored();
      stored[entry.actionId] = entry;
      var ids = Object.keys(stored).sort(function (a, b) { return (Number(stored[a] && stored[a].armedAtMs) || 0) - (Number(stored[b] && stored[b].armedAtMs) || 0); });
      while (ids.length > EXEC_LEDGER_MAX) delete stored[ids.shift()];
      s.setItem(EXEC_LEDGER_STORAGE, JSON.stringify(stored));
    } catch (e) { /* no storage here (opaque origin, quota): the in-document copy remains */ }
  }

  // The entry of an action: this document's copy, or the stored one (a delivery
  // recorded by an earlier document of this origin wins over a stale copy).
  function execGet(actionId) {
    var l = root[EXEC_LEDGER_KEY];
    var mem = l && l.document === document ? l.entries[actionId] : null;
    var stored = execStored()[actionId];
    if (stored && typeof stored === 'object' && stored.status === 'delivered' && (!mem || mem.status !== 'delivered')) return stored;
    return mem || (stored && typeof stored === 'object' ? stored : null);
  }

  function execListen(entry, el, types) {
    var l = execLedger();
    if (l.listener) l.listener();
    var done = false;
    var stop = function () {
      done = true;
      for (var j = 0; j < types.length; j++) root.removeEventListener(types[j], fn, true);
      if (l.listener === stop) l.listener = null;
    };
    var fn = function (e) {
      if (done) return;
      var t = e.target;
      if (el && !(t === el || (t && typeof el.contains === 'function' && el.contains(t)))) return;
      stop();
      var next = {};
      for (var k in entry) next[k] = entry[k];
      next.status = 'delivered';
      next.trusted = !!e.isTrusted;
      next.eventType = e.type;
      next.deliveredAtMs = now();
      execPut(next);
      var binding = root[EXEC_BINDING];
      if (typeof binding === 'function') {
        try { binding(JSON.stringify({ actionId: next.actionId, trusted: next.trusted, eventType: next.eventType, url: clip(currentUrl(), 4096) })); } catch (err) { /* the engine is gone */ }
      }
    };
    for (var i = 0; i < types.length; i++) root.addEventListener(types[i], fn, true);
    l.listener = stop;
  }

  // Any connected element the document's identity map knows (snapshot controls and
  // CSS query matches), with the observed identity.
  function execResolve(prefix, ref) {
    var el = elementById(ref.elementId);
    if (!el) return h5Fail(prefix + 'target_changed');
    var identity = h5IdentityOf(el);
    for (var k = 0; k < H5_IDENTITY_KEYS.length; k++) {
      var key = H5_IDENTITY_KEYS[k];
      if (identity[key] !== ref[key]) return h5Fail(prefix + 'target_changed', false, { field: key });
    }
    return { ok: true, element: el, identity: identity };
  }

  function execValueOf(el) {
    return el.isContentEditable ? h5Str(el.innerText).replace(/\n$/, '') : h5Str(el.value);
  }

  // Select the whole content so the engine's typing replaces it.
  function execSelectAll(el) {
    try {
      if (el.isContentEditable) {
        var range = document.createRange();
        range.selectNodeContents(el);
        var sel = root.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
      } else if (typeof el.select === 'function') {
        el.select();
      }
    } catch (e) { /* a type without selection: typing then appends, and the receipt's `accepted` says so */ }
  }

  function execMatchList(p) {
    var by = p.by, value = p.value, list = [];
    if (by === 'elementId') { var one = elementById(value); if (one) list = [one]; }
    else if (by === 'css') list = document.querySelectorAll(value);
    else {
      var all = document.querySelectorAll(CONTROL_QUERY);
      for (var i = 0; i < all.length && i < H5_LIMITS.scan; i++) {
        var c = all[i];
        if (by === 'text' ? h5TextOf(c) === value : attr(c, 'aria-label') === value) list.push(c);
      }
    }
    var out = [];
    for (var j = 0; j < list.length; j++) if (p.name == null || attr(list[j], 'name') === p.name) out.push(list[j]);
    return out;
  }

  // Geometry equality by field: a geometry that travelled through an engine's
  // JSON may come back with its keys in another order.
  function execSameGeometry(a, b) {
    if (!a || !b) return false;
    var keys = ['x', 'y', 'width', 'height', 'scrollX', 'scrollY'];
    for (var i = 0; i < keys.length; i++) if (a[keys[i]] !== b[keys[i]]) return false;
    var ra = a.bounds, rb = b.bounds;
    if (!ra || !rb) return ra === rb;
    return ra.x === rb.x && ra.y === rb.y && ra.width === rb.width && ra.height === rb.height;
  }

  function execTurn(prefix, key, request) {
    var op = request.operation;
    var p = request.payload;
    if (op === 'document') {
      var d = h5Observe(key, request.seed);
      return { ok: true, documentId: d.documentId, url: currentUrl(), title: clip(document.title, H5_LIMITS.title), readyState: document.readyState, viewport: h5Viewport() };
    }
    if (!p || typeof p !== 'object') return h5Fail('invalid_h5_payload');
    if (op === 'ledger') {
      if (typeof p.actionId !== 'string' || !p.actionId) return h5Fail('invalid_h5_payload');
      var live = h5State(key);
      var entry = execGet(p.actionId);
      var out = { ok: true, entry: entry, url: currentUrl(), documentId: live ? live.documentId : null, readyState: document.readyState };
      var target = entry && entry.elementId ? elementById(entry.elementId) : null;
      if (target && entry.action === 'input') {
        var v = execValueOf(target);
        out.valueLength = v.length;
        out.sensitive = isSensitive(target);
        if (!out.sensitive) out.value = clip(v, H5_LIMITS.value);
        if (typeof p.text === 'string') out.accepted = v === p.text;
      }
      return out;
    }
    if (op === 'match') {
      var s0 = h5Observe(key, request.seed);
      var res = { ok: true, documentId: s0.documentId, url: currentUrl(), title: clip(document.title, H5_LIMITS.title) };
      if (typeof p.text === 'string') {
        var body = document.body ? h5Str(document.body.innerText) : '';
        res.textFound = body.indexOf(p.text) >= 0;
        return res;
      }
      var found;
      try { found = execMatchList(p); } catch (e) { return h5Fail(prefix + 'invalid_css', false, { scriptError: clip(String(e && e.message || e), 500) }); }
      var matches = [];
      var visible = 0;
      for (var i = 0; i < found.length; i++) {
        var shown = isVisible(found[i]);
        if (shown) visible += 1;
        if (matches.length < EXEC_MATCHES) matches.push(h5Describe(found[i]));
      }
      res.count = found.length;
      res.visible = visible;
      res.matches = matches;
      return res;
    }
    var s = h5State(key);
    var ref = p.pageRef;
    if (!s || !ref || ref.documentId !== s.documentId || ref.url !== currentUrl()) return h5Fail('reobserve_required');
    if (op === 'query') {
      if (typeof p.css !== 'string' || !p.css) return h5Fail('invalid_h5_payload');
      var list;
      try { list = document.querySelectorAll(p.css); } catch (e) { return h5Fail(prefix + 'invalid_css', false, { scriptError: clip(String(e && e.message || e), 500) }); }
      var described = [];
      for (var q = 0; q < list.length && described.length < EXEC_MATCHES; q++) {
        if (p.name != null && attr(list[q], 'name') !== p.name) continue;
        described.push(h5Describe(list[q]));
      }
      return { ok: true, count: list.length, matches: described };
    }
    // arm
    var a = p.action;
    if (!EXEC_EVENTS.hasOwnProperty(a)) return h5Fail('invalid_h5_action');
    if (typeof p.actionId !== 'string' || !p.actionId || p.actionId.length > 1024) return h5Fail('invalid_h5_payload');
    var el = null, identity = null, geometry = null;
    if (p.element) {
      if (typeof p.element !== 'object' || typeof p.element.elementId !== 'string') return h5Fail('invalid_h5_element_ref');
      if (a === 'click' || a === 'input') {
        var prepared = h5Prepare(prefix, { action: a, element: p.element }, execResolve);
        if (!prepared.ok) return prepared;
        if (request.geometry && !execSameGeometry(prepared.geometry, request.geometry)) return h5Fail(prefix + 'target_changed', false, { geometry: prepared.geometry, preparedGeometry: request.geometry });
        el = prepared.element; identity = prepared.identity; geometry = prepared.geometry;
      } else {
        var r = execResolve(prefix, p.element);
        if (!r.ok) return r;
        el = r.element; identity = r.identity;
        var vis = isVisible(el), dis = isDisabled(el);
        if (!vis || (a !== 'wheel' && dis)) return h5Fail(prefix + 'target_not_clickable');
        if (a === 'scrollIntoView') el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
        var inter = interactionOf(el, isVisible(el), isDisabled(el));
        var vp = h5Viewport();
        geometry = { x: inter.point ? inter.point.x : Math.round(vp.width / 2), y: inter.point ? inter.point.y : Math.round(vp.height / 2), width: vp.width, height: vp.height, scrollX: vp.scrollX, scrollY: vp.scrollY, bounds: rectOf(el) };
      }
      if (a === 'input' || a === 'key') {
        if (document.activeElement !== el) { try { el.focus({ preventScroll: true }); } catch (e) { el.focus(); } }
        if (a === 'input') {
          execSelectAll(el);
          // Focus handlers may rewrite the page: the element must still be where it was.
          var again = h5Prepare(prefix, { action: a, element: p.element }, execResolve);
          if (!again.ok || again.element !== el || !execSameGeometry(again.geometry, geometry)) return h5Fail(prefix + 'target_changed', false, { refocused: true });
        }
      }
    } else if (a === 'click' || a === 'input' || a === 'scrollIntoView') {
      return h5Fail('invalid_h5_element_ref');
    } else {
      var port = h5Viewport();
      geometry = { x: Math.round(port.width / 2), y: Math.round(port.height / 2), width: port.width, height: port.height, scrollX: port.scrollX, scrollY: port.scrollY, bounds: null };
    }
    var record = { actionId: p.actionId, action: a, status: a === 'scrollIntoView' ? 'delivered' : 'dispatching', elementId: identity ? identity.elementId : null,
      documentId: s.documentId, url: clip(currentUrl(), 4096), armedAtMs: now() };
    if (a === 'scrollIntoView') { record.trusted = false; record.eventType = 'scrollIntoView'; record.deliveredAtMs = record.armedAtMs; }
    execPut(record);
    if (EXEC_EVENTS[a].length) execListen(record, el, EXEC_EVENTS[a]);
    var armed = { ok: true, dispatched: a === 'scrollIntoView', ambiguous: false, element: identity, geometry: geometry, focused: el ? document.activeElement === el : null };
    if (a === 'input' && el) {
      var current = execValueOf(el);
      armed.currentLength = current.length;
      armed.unchanged = typeof p.text === 'string' && current === p.text;
    }
    // WebDriver turns a returned element into an element reference.
    if (request.returnElement === true && el) armed.elementRef = el;
    return armed;
  }

  function h5Render(request) {
    try {
      if (!request || typeof request !== 'object') return h5Fail('invalid_h5_request');
      var prefix = request.errorPrefix;
      var key = H5_STATE_KEYS.hasOwnProperty(prefix) ? H5_STATE_KEYS[prefix] : null;
      if (!key || typeof request.seed !== 'string' || !request.seed) return h5Fail('invalid_h5_request');
      if (typeof document === 'undefined' || !doc) return h5Fail(prefix + 'document_unavailable');
      var op = request.operation;
      if (op === 'snapshot') return h5Snapshot(h5Observe(key, request.seed));
      if (prefix === EXEC_PREFIX && (op === 'document' || op === 'ledger' || op === 'match' || op === 'query' || op === 'arm')) return execTurn(prefix, key, request);
      var resolve = prefix === EXEC_PREFIX ? execResolve : h5Resolve;
      if (op !== 'prepare' && op !== 'action') return h5Fail('invalid_h5_request');
      var p = request.payload;
      if (!p || typeof p !== 'object') return h5Fail('invalid_h5_payload');
      var s = h5State(key);
      var ref = p.pageRef;
      if (!s || !ref || ref.documentId !== s.documentId || ref.url !== currentUrl()) return h5Fail('reobserve_required');
      var a = p.action;
      var pointer = a === 'click' || a === 'input';
      if (op === 'prepare' && !pointer) return h5Fail('invalid_h5_action');
      if (pointer || a === 'scroll') {
        if (!p.element || typeof p.element !== 'object' || typeof p.element.elementId !== 'string') return h5Fail('invalid_h5_element_ref');
        if (a === 'input' && typeof p.text !== 'string') return h5Fail('invalid_h5_text');
      }
      if (op === 'prepare') {
        var prepared = h5Prepare(prefix, p, resolve);
        if (!prepared.ok) return prepared;
        return { ok: true, dispatched: false, ambiguous: false, element: prepared.identity, interaction: prepared.interaction, geometry: prepared.geometry };
      }
      if (a === 'eval') {
        if (typeof p.script !== 'string') return h5Fail('invalid_h5_script');
        return h5Eval(p.script);
      }
      if (a === 'scrollBy') {
        var dx = Number(p.deltaX), dy = Number(p.deltaY);
        if (!isFinite(dx) || !isFinite(dy) || (dx === 0 && dy === 0)) return h5Fail('invalid_h5_scroll');
        root.scrollBy({ left: dx, top: dy, behavior: 'instant' });
        return { ok: true, dispatched: true, ambiguous: false, scrollX: Math.round(root.scrollX), scrollY: Math.round(root.scrollY) };
      }
      if (a === 'scroll') {
        var r = h5Resolve(prefix, p.element);
        if (!r.ok) return r;
        if (!isVisible(r.element) || isDisabled(r.element)) return h5Fail(prefix + 'target_not_clickable');
        r.element.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
        var vis = isVisible(r.element), dis = isDisabled(r.element);
        return { ok: true, dispatched: true, ambiguous: false, element: r.identity, bounds: rectOf(r.element), interaction: interactionOf(r.element, vis, dis) };
      }
      if (pointer) {
        if (!request.geometry || typeof request.geometry !== 'object') return h5Fail('invalid_h5_request');
        return h5Act(prefix, p, request.geometry);
      }
      return h5Fail('invalid_h5_action');
    } catch (e) {
      // A renderer fault: in an action turn the effect may or may not have run.
      var acting = !!request && request.operation === 'action';
      return h5Fail('h5_renderer_failed', false, { dispatched: acting ? null : false, ambiguous: acting, scriptError: clip(String(e && e.message || e), 2000) });
    }
  }

  // ------------------------------------------------------------------ the bridge

  function createAiAppBridge(options) {
    options = options || {};
    if (!options.endpoint) throw new Error('createAiAppBridge: `endpoint` is required');
    var WS = options.WebSocket || root.WebSocket;
    var capture = options.capture || {};
    var want = function (k) { return capture[k] !== false; };
    var session = storage('sessionStorage');
    var local = storage('localStorage');
    var storageKey = options.storageKey || SESSION_STORAGE_KEY;
    var sessionId = options.sessionId || (session && session.getItem(storageKey)) || randomHex32();
    if (session && !options.sessionId) { try { session.setItem(storageKey, sessionId); } catch (e) { /* private mode */ } }
    var runtimeEpoch = randomHex32();
    var appName = clip(options.appName || (typeof document !== 'undefined' && document.title) || 'web-app', 1024) || 'web-app';
    var reconnect = options.reconnect !== false;

    var state = {
      started: false,
      stopped: false,
      socket: null,
      binding: null,
      status: 'idle',
      lastError: null,
      attempts: 0,
      timer: null,
      delayMs: 1000,
      connectedAtMs: null,
      seq: { logs: 0, network: 0, state: 0, events: 0 },
      losses: { logs: 0, network: 0, state: 0, events: 0 },
      rejected: 0,
      queue: [],
      queueBytes: 0,
      inflight: new Map(),
      inflightBytes: 0,
      completions: new Map(),
      active: null,
      actions: new Map(),
      stateProviders: new Map(),
      pendingRequests: 0,
      ui: [],
      uiTimer: null,
      mutations: 0,
      mutationTotal: 0,
      mutationTimer: null,
      observation: null,
      currentAction: null
    };

    var journalKey = JOURNAL_PREFIX + sessionId;

    function journalRead() {
      if (!local) return {};
      try { return JSON.parse(local.getItem(journalKey) || '{}') || {}; } catch (e) { return {}; }
    }
    function journalWrite(j) {
      if (!local) return;
      try {
        if (Object.keys(j).length) local.setItem(journalKey, JSON.stringify(j)); else local.removeItem(journalKey);
      } catch (e) { /* quota: the in-memory copy still resends while this document lives */ }
    }
    function journalPut(actionId, entry) { var j = journalRead(); j[actionId] = entry; journalWrite(j); }
    function journalDrop(actionId) { var j = journalRead(); delete j[actionId]; journalWrite(j); }

    function pageRef() {
      return { schemaVersion: DOM_TARGET_SCHEMA, sessionId: sessionId, runtimeEpoch: runtimeEpoch, targetId: TARGET_ID, navigationId: doc.navigationId, url: currentUrl() };
    }

    function target() { return { sessionId: sessionId, runtimeEpoch: runtimeEpoch, targetId: TARGET_ID }; }

    // -------------------------------------------------------------- transport

    function rawSend(obj) {
      var s = state.socket;
      if (!s || s.readyState !== 1 || !state.binding) return false;
      obj.binding = state.binding;
      var text = JSON.stringify(obj);
      if (byteLength(text) > LIMITS.message) return false;
      try { s.send(text); return true; } catch (e) { return false; }
    }

    function connect() {
      if (state.stopped || state.socket) return;
      var url = options.endpoint + (options.endpoint.indexOf('?') >= 0 ? '&' : '?') + 'token=' + encodeURIComponent(options.token || '');
      var s;
      try { s = new WS(url); } catch (e) { state.lastError = String(e && e.message || e); schedule(); return; }
      state.socket = s;
      state.status = 'connecting';
      // The host's refusal code (from its `error` frame), and whether to stay away.
      var rejected = null;
      var noRetry = false;
      s.onopen = function () {
        s.send(JSON.stringify({
          type: 'hello', schemaVersion: PROTOCOL, sessionId: sessionId, runtimeEpoch: runtimeEpoch, targetId: TARGET_ID,
          executionSchema: EXECUTION_SCHEMA, domTargetSchema: DOM_TARGET_SCHEMA, captureSchema: CAPTURE_SCHEMA,
          appName: appName, url: clip(currentUrl(), 4096), origin: clip(location.origin, 1024), route: currentRoute()
        }));
      };
      s.onmessage = function (ev) {
        var msg;
        try { msg = JSON.parse(ev.data); } catch (e) { return; }
        if (!msg || typeof msg !== 'object') return;
        if (msg.type === 'error') { rejected = msg.error; state.lastError = msg.error + ': ' + (msg.message || ''); return; }
        if (msg.type === 'helloAck') {
          if (msg.ok !== true || !msg.binding) return;
          state.binding = msg.binding;
          state.status = 'connected';
          state.connectedAtMs = now();
          state.attempts = 0;
          state.delayMs = 1000;
          onConnected();
          return;
        }
        if (!state.binding || !sameJson(msg.binding, state.binding)) {
          // A frame for another binding: this connection can no longer be trusted.
          state.lastError = 'web_binding_mismatch';
          noRetry = true;
          try { s.close(1000, 'web_binding_mismatch'); } catch (e) { /* already closing */ }
          return;
        }
        onMessage(msg);
      };
      s.onclose = function (ev) {
        if (state.socket === s) state.socket = null;
        state.binding = null;
        requeueInflight();
        if (state.stopped) { state.status = 'stopped'; return; }
        // 1008 is a policy refusal: do not hammer the host, except when the session
        // is merely still held by this page's previous socket.
        if (noRetry || (ev.code === 1008 && rejected !== 'web_session_busy')) { state.status = 'rejected'; state.lastError = state.lastError || 'closed with 1008'; return; }
        state.status = 'disconnected';
        schedule();
      };
      s.onerror = function () { state.lastError = state.lastError || 'socket error'; };
    }

    function schedule() {
      if (!reconnect || state.stopped || state.timer) return;
      var delay = state.delayMs;
      state.delayMs = Math.min(state.delayMs * 2, 30000);
      state.attempts += 1;
      state.timer = setTimeout(function () { state.timer = null; connect(); }, delay);
    }

    function onConnected() {
      // Completions first: the host is waiting to settle those actions.
      state.completions.forEach(function (result) { rawSend({ type: 'completion', result: result }); });
      pump();
    }

    function onMessage(msg) {
      switch (msg.type) {
        case 'captureAck': return onCaptureAck(msg);
        case 'completionAck': return onCompletionAck(msg);
        case 'read': return onRead(msg);
        case 'command': return onCommand(msg);
        case 'cancel': return onCancel(msg);
        default: return undefined;
      }
    }

    function respond(requestId, result) { rawSend({ type: 'response', requestId: requestId, result: result }); }

    // -------------------------------------------------------------- capture queue

    function enqueue(stream, item, actionId) {
      if (state.stopped) return null;
      state.seq[stream] += 1;
      var record = {
        type: 'capture', captureId: randomHex32(), stream: stream, sequence: state.seq[stream],
        actionId: actionId || null, item: item
      };
      var text = safeStringify(record);
      var bytes = byteLength(text);
      if (bytes > LIMITS.record) { state.losses[stream] += 1; return null; }
      state.queue.push({ record: record, bytes: bytes, at: now() });
      state.queueBytes += bytes;
      while (state.queue.length > LIMITS.queueRecords || state.queueBytes > LIMITS.queueBytes) dropOldest();
      pump();
      return record.captureId;
    }

    function dropOldest() {
      var e = state.queue.shift();
      if (!e) return;
      state.queueBytes -= e.bytes;
      state.losses[e.record.stream] += 1;
    }

    function expire() {
      var cutoff = now() - LIMITS.queueTtlMs;
      while (state.queue.length && state.queue[0].at < cutoff) dropOldest();
    }

    function pump() {
      expire();
      while (state.queue.length && state.binding && state.inflight.size < LIMITS.inflightRecords && state.inflightBytes + state.queue[0].bytes <= LIMITS.inflightBytes) {
        var e = state.queue[0];
        if (!rawSend(JSON.parse(JSON.stringify(e.record)))) break;
        state.queue.shift();
        state.queueBytes -= e.bytes;
        state.inflight.set(e.record.captureId, e);
        state.inflightBytes += e.bytes;
      }
    }

    // Records sent but not acknowledged go back to the front, in order, to be resent
    // (same captureId and sequence) on the next connection.
    function requeueInflight() {
      var back = [];
      state.inflight.forEach(function (e) { back.push(e); });
      back.sort(function (a, b) { return a.at - b.at; });
      state.inflight.clear();
      state.inflightBytes = 0;
      for (var i = back.length - 1; i >= 0; i--) { state.queue.unshift(back[i]); state.queueBytes += back[i].bytes; }
      while (state.queue.length > LIMITS.queueRecords || state.queueBytes > LIMITS.queueBytes) dropOldest();
    }

    function onCaptureAck(msg) {
      var e = state.inflight.get(msg.captureId);
      if (!e) return;
      state.inflight.delete(msg.captureId);
      state.inflightBytes -= e.bytes;
      if (!msg.receipt || msg.receipt.stored !== true) state.rejected += 1;
      pump();
    }

    function baseItem(source, association) {
      return { source: source, timestampMs: now(), url: clip(currentUrl(), 4096), route: currentRoute(), pageRef: pageRef(), association: association };
    }

    // Association: explicit when the app names the action, synchronous when the
    // record is produced inside the SDK's dispatch turn, otherwise unattributed.
    function associate(explicitActionId) {
      if (explicitActionId) return { actionId: String(explicitActionId), association: 'explicit' };
      if (state.currentAction) return { actionId: state.currentAction, association: 'synchronous' };
      return { actionId: null, association: 'unattributed' };
    }

    function record(stream, source, fields, explicitActionId) {
      var a = associate(explicitActionId);
      var item = baseItem(source, a.association);
      if (fields && typeof fields === 'object') {
        var clean = jsonClone(fields) || {};
        for (var k in clean) if (Object.prototype.hasOwnProperty.call(clean, k) && !(k in item)) item[k] = clean[k];
      }
      return enqueue(stream, item, a.actionId);
    }

    // -------------------------------------------------------------- UI capture

    function uiEvent(type, el, extra) {
      if (state.stopped) return;
      var ev = { type: type, timestampMs: now() };
      if (el && el.nodeType === 1) {
        ev.target = { elementId: doc.ids.get(el) || null, tag: tagOf(el), id: attr(el, 'id'), name: attr(el, 'name'), text: clip(isSensitive(el) ? '' : textOf(el), 80) };
        if (isSensitive(el)) ev.target.sensitive = true;
      }
      if (extra) for (var k in extra) ev[k] = extra[k];
      if (state.currentAction) {
        // Inside the SDK's own dispatch turn: one record carrying the action id.
        flushUi();
        record('events', 'ui-auto', { category: 'ui', name: 'batch', events: [ev] });
        return;
      }
      state.ui.push(ev);
      if (state.ui.length >= LIMITS.uiBatchEvents) flushUi();
      else if (!state.uiTimer) state.uiTimer = setTimeout(flushUi, LIMITS.uiBatchMs);
    }

    function flushUi(force) {
      if (state.uiTimer) { clearTimeout(state.uiTimer); state.uiTimer = null; }
      if (state.mutations && (state.ui.length || force === true)) {
        state.ui.push({ type: 'dom.mutation', timestampMs: now(), count: state.mutations, fingerprint: (state.mutations * 2654435761 >>> 0).toString(16) });
        state.mutations = 0;
      }
      if (!state.ui.length) return;
      var events = state.ui;
      state.ui = [];
      var saved = state.currentAction;
      state.currentAction = null;
      record('events', 'ui-auto', { category: 'ui', name: 'batch', events: events });
      state.currentAction = saved;
    }

    var listeners = [];
    function listen(target, type, fn, opts) { target.addEventListener(type, fn, opts); listeners.push([target, type, fn, opts]); }

    function installUiCapture() {
      if (!want('ui') || typeof document === 'undefined') return;
      listen(document, 'click', function (e) { uiEvent('interaction.click', e.target, { trusted: e.isTrusted }); }, true);
      listen(document, 'input', function (e) {
        var el = e.target;
        uiEvent('interaction.input', el, { valueLength: el && el.value != null ? String(el.value).length : null });
      }, true);
      listen(document, 'change', function (e) {
        var el = e.target;
        var extra = {};
        if (el && (el.type === 'checkbox' || el.type === 'radio')) extra.checked = !!el.checked;
        uiEvent('interaction.change', el, extra);
      }, true);
      listen(document, 'focusin', function (e) { uiEvent('interaction.focus', e.target); }, true);
      if (typeof MutationObserver !== 'undefined') {
        var mo = new MutationObserver(function (list) {
          for (var i = 0; i < list.length; i++) {
            var m = list[i];
            if (m.type === 'attributes' && m.attributeName === 'open' && tagOf(m.target) === 'dialog') {
              uiEvent(m.target.hasAttribute('open') ? 'dialog.open' : 'dialog.close', m.target);
            }
          }
          // Mutation counts ride along with the next batch (or barrier) instead of
          // producing records of their own: an animated page would flood the stream.
          state.mutations += list.length;
          state.mutationTotal += list.length;
        });
        mo.observe(document.documentElement, { childList: true, subtree: true, attributes: true, characterData: true });
        listeners.push([null, 'mutation', mo]);
      }
    }

    var onNavigation = function (reason) {
      if (state.stopped) return;
      uiEvent('route.change', null, { reason: reason, route: currentRoute(), navigationId: doc.navigationId });
    };

    // -------------------------------------------------------------- auto capture

    var hooks = root.__aabWebHooksV2;
    if (!hooks) {
      // Wrappers are installed once per document and dispatch to the live bridge, so
      // stop()/start() and several bridges never stack wrappers.
      hooks = { bridge: null };
      try { Object.defineProperty(root, '__aabWebHooksV2', { value: hooks, enumerable: false }); } catch (e) { root.__aabWebHooksV2 = hooks; }
      installHooks(hooks);
    }

    function installHooks(h) {
      if (root.console) {
        ['debug', 'log', 'info', 'warn', 'error'].forEach(function (level) {
          var original = root.console[level];
          if (typeof original !== 'function') return;
          root.console[level] = function () {
            var b = h.bridge;
            if (b && b.want('console') && !b.inside) {
              b.inside = true;
              try { b.record('logs', 'console-auto', { level: level, message: formatArgs(arguments) }); } finally { b.inside = false; }
            }
            return original.apply(this, arguments);
          };
        });
      }
      if (root.addEventListener) {
        root.addEventListener('error', function (e) {
          var b = h.bridge;
          if (!b || !b.want('errors')) return;
          if (e.target && e.target !== root && e.target.nodeType === 1) {
            b.record('logs', 'error-auto', { level: 'error', message: 'resource failed to load', resource: clip(e.target.src || e.target.href || '', 500), tag: tagOf(e.target) });
            return;
          }
          b.record('logs', 'error-auto', { level: 'error', message: clip(e.message, LIMITS.logMessage), filename: clip(e.filename, 500), lineno: e.lineno, colno: e.colno, stack: clip(e.error && e.error.stack, 4000) });
        }, true);
        root.addEventListener('unhandledrejection', function (e) {
          var b = h.bridge;
          if (!b || !b.want('errors')) return;
          var r = e.reason;
          b.record('logs', 'error-auto', { level: 'error', message: clip('unhandled rejection: ' + (r && r.message ? r.message : formatArgs([r])), LIMITS.logMessage), stack: clip(r && r.stack, 4000) });
        });
      }
      if (typeof root.fetch === 'function') {
        var originalFetch = root.fetch;
        root.fetch = function (input, init) {
          var b = h.bridge;
          if (!b || !b.want('fetch')) return originalFetch.apply(this, arguments);
          var method = ((init && init.method) || (input && input.method) || 'GET').toUpperCase();
          var url = typeof input === 'string' ? input : (input && input.url) || String(input);
          var started = now();
          // Identity is fixed when the request starts, never when it ends.
          var assoc = b.associate(null);
          var reqBody = b.options.captureRequestBodies ? bodyOf(init && init.body) : { state: 'disabled' };
          b.requestStarted();
          var p = originalFetch.apply(this, arguments);
          return p.then(function (res) {
            var finish = function (resBody) {
              settle(reqBody).then(function (rb) {
                b.requestFinished();
                b.recordNetwork('fetch-auto', assoc, { method: method, url: clip(url, 4096), status: res.status, ok: res.ok, durationMs: now() - started }, rb, resBody);
              });
            };
            if (b.options.captureResponseBodies) readBody(res.clone()).then(finish, function () { finish({ state: 'unavailable' }); });
            else finish({ state: 'disabled' });
            return res;
          }, function (err) {
            settle(reqBody).then(function (rb) {
              b.requestFinished();
              b.recordNetwork('fetch-auto', assoc, { method: method, url: clip(url, 4096), status: 0, ok: false, durationMs: now() - started, error: clip(err && err.message || String(err), 500) }, rb, { state: 'unavailable' });
            });
            throw err;
          });
        };
      }
      if (typeof root.XMLHttpRequest === 'function') {
        var proto = root.XMLHttpRequest.prototype;
        var open = proto.open, send = proto.send;
        proto.open = function (method, url) {
          this.__aab = { method: String(method || 'GET').toUpperCase(), url: String(url) };
          return open.apply(this, arguments);
        };
        proto.send = function (body) {
          var b = h.bridge;
          var info = this.__aab;
          if (b && info && b.want('xhr')) {
            var xhr = this;
            var started = now();
            var assoc = b.associate(null);
            var reqBody = b.options.captureRequestBodies ? bodyOf(body) : { state: 'disabled' };
            b.requestStarted();
            xhr.addEventListener('loadend', function () {
              var resBody = { state: 'disabled' };
              if (b.options.captureResponseBodies) {
                try { resBody = xhrBody(xhr); } catch (e) { resBody = { state: 'unsupported-body-type' }; }
              }
              var fields = { method: info.method, url: clip(info.url, 4096), status: xhr.status, ok: xhr.status >= 200 && xhr.status < 300, durationMs: now() - started };
              Promise.all([settle(reqBody), settle(resBody)]).then(function (bodies) {
                b.requestFinished();
                b.recordNetwork('xhr-auto', assoc, fields, bodies[0], bodies[1]);
              });
            });
          }
          return send.apply(this, arguments);
        };
      }
    }

    function textBody(text) {
      if (text == null) return { state: 'unsupported-body-type' };
      if (text === '') return { state: 'empty' };
      if (text.length > LIMITS.body) return { state: 'truncated', body: text.slice(0, LIMITS.body), encoding: 'utf8' };
      return { state: 'complete', body: text, encoding: 'utf8' };
    }

    // Binary bodies keep their bytes as base64 within the same 12000-character
    // budget (9000 bytes); a longer body is `truncated` to its first 9000 bytes.
    function bytesBody(bytes) {
      if (!bytes) return { state: 'unsupported-body-type' };
      if (!bytes.length) return { state: 'empty' };
      var max = Math.floor(LIMITS.body / 4) * 3;
      var cut = bytes.length > max;
      return { state: cut ? 'truncated' : 'complete', body: base64(cut ? bytes.subarray(0, max) : bytes), encoding: 'base64' };
    }

    function base64(bytes) {
      var bin = '';
      for (var i = 0; i < bytes.length; i += 0x8000) bin += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
      return btoa(bin);
    }

    function bytesOf(v) {
      if (typeof ArrayBuffer === 'undefined' || v == null) return null;
      if (v instanceof ArrayBuffer) return new Uint8Array(v);
      if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
      return null;
    }

    // A body whose reading is asynchronous (Blob), bounded like a response read.
    function blobBody(blob) {
      return new Promise(function (resolve) {
        var timer = setTimeout(function () { resolve({ state: 'timeout' }); }, 2000);
        blob.arrayBuffer().then(function (buf) { clearTimeout(timer); resolve(bytesBody(new Uint8Array(buf))); }, function () { clearTimeout(timer); resolve({ state: 'unavailable' }); });
      });
    }

    // A body descriptor, or a promise of one.
    function settle(body) { return Promise.resolve(body).then(null, function () { return { state: 'unavailable' }; }); }

    function bodyOf(body) {
      if (body == null) return { state: 'empty' };
      if (typeof body === 'string') return textBody(body);
      if (typeof URLSearchParams !== 'undefined' && body instanceof URLSearchParams) return textBody(body.toString());
      var bytes = bytesOf(body);
      if (bytes) return bytesBody(bytes);
      if (typeof Blob !== 'undefined' && body instanceof Blob && typeof body.arrayBuffer === 'function') return blobBody(body);
      return { state: 'unsupported-body-type' };
    }

    var TEXTUAL = /^(text\/|application\/(json|xml|javascript|ecmascript|x-www-form-urlencoded|graphql)\b|application\/[^;]*\+(json|xml)\b|image\/svg\+xml)/i;

    // Text when the declared type is textual (or undeclared and valid UTF-8), else base64.
    function decodeBody(contentType, buf) {
      var bytes = new Uint8Array(buf);
      if (!bytes.length) return { state: 'empty' };
      var type = String(contentType || '').trim();
      if (typeof TextDecoder !== 'undefined') {
        if (TEXTUAL.test(type)) return textBody(new TextDecoder('utf-8').decode(bytes));
        if (!type) { try { return textBody(new TextDecoder('utf-8', { fatal: true }).decode(bytes)); } catch (e) { /* binary */ } }
      }
      return bytesBody(bytes);
    }

    function readBody(res) {
      return new Promise(function (resolve) {
        var timer = setTimeout(function () { resolve({ state: 'timeout' }); }, 2000);
        var type = res.headers && res.headers.get ? res.headers.get('content-type') : '';
        res.arrayBuffer().then(function (buf) { clearTimeout(timer); resolve(decodeBody(type, buf)); }, function () { clearTimeout(timer); resolve({ state: 'unavailable' }); });
      });
    }

    function xhrBody(xhr) {
      var t = xhr.responseType;
      if (t === '' || t === 'text') return textBody(xhr.responseText);
      if (t === 'arraybuffer') return bytesBody(bytesOf(xhr.response));
      if (t === 'json') return xhr.response == null ? { state: 'empty' } : textBody(safeStringify(xhr.response));
      if (t === 'blob' && xhr.response && typeof xhr.response.arrayBuffer === 'function') return blobBody(xhr.response);
      return { state: 'unsupported-body-type' };
    }

    function recordNetwork(source, assoc, fields, reqBody, resBody) {
      var item = baseItem(source, assoc.association);
      for (var k in fields) item[k] = fields[k];
      item.requestBodyState = reqBody.state;
      if (reqBody.body != null) { item.requestBody = reqBody.body; item.requestBodyEncoding = reqBody.encoding; }
      item.responseBodyState = resBody.state;
      if (resBody.body != null) { item.responseBody = resBody.body; item.responseBodyEncoding = resBody.encoding; }
      enqueue('network', item, assoc.actionId);
    }

    // -------------------------------------------------------------- DOM snapshot

    function snapshotDom(args) {
      args = args || {};
      var max = Math.max(1, Math.min(LIMITS.maxControls, args.maxControls | 0 || LIMITS.defaultControls));
      var list;
      try { list = document.querySelectorAll(args.selector || CONTROL_QUERY); } catch (e) {
        return { ok: false, error: 'invalid_web_selector', message: 'invalid CSS selector: ' + String(e && e.message || e), dispatched: false };
      }
      var controls = [];
      for (var i = 0; i < list.length && controls.length < max; i++) controls.push(describe(list[i], i));
      var body = document.body ? (document.body.innerText || '') : '';
      var ref = pageRef();
      var dom = {
        ok: true,
        targetSchema: DOM_TARGET_SCHEMA,
        title: clip(document.title, 1024),
        url: ref.url,
        readyState: document.readyState,
        viewport: { width: root.innerWidth, height: root.innerHeight, scrollX: Math.round(root.scrollX), scrollY: Math.round(root.scrollY) },
        bodyText: body.length > LIMITS.bodyText ? body.slice(0, LIMITS.bodyText) : body,
        bodyTextTruncated: body.length > LIMITS.bodyText,
        controls: controls,
        controlCount: list.length,
        truncated: list.length > controls.length,
        updatedAtMs: now(),
        pageRef: ref
      };
      // Keep the reply inside one message: drop controls from the end until it fits.
      var budget = LIMITS.message - 4096;
      var size = byteLength(safeStringify(dom));
      while (size > budget && dom.controls.length) {
        var cut = Math.max(1, Math.ceil(dom.controls.length / 10));
        dom.controls.splice(dom.controls.length - cut, cut);
        dom.truncated = true;
        dom.truncatedReason = 'message_limit';
        size = byteLength(safeStringify(dom));
      }
      return dom;
    }

    // -------------------------------------------------------------- selectors

    function fail(error, message, extra) {
      var r = { ok: false, error: error, message: message };
      if (extra) for (var k in extra) r[k] = extra[k];
      return r;
    }

    function matchesFilters(el, sel) {
      if (sel.tag && tagOf(el) !== String(sel.tag).toLowerCase()) return false;
      if (sel.role && roleOf(el) !== sel.role) return false;
      return true;
    }

    function candidate(el) {
      var c = identityOf(el);
      c.bounds = rectOf(el);
      c.interaction = interactionOf(el, isVisible(el), isDisabled(el));
      return c;
    }

    // Resolve a typed selector to exactly one visible element.
    function resolve(sel) {
      if (!sel || typeof sel !== 'object' || Array.isArray(sel)) return fail('web_selector_required', 'the selector must be an object');
      var keys = ['elementId', 'text', 'ariaLabel', 'css'].filter(function (k) { return sel[k] != null; });
      if (keys.length !== 1) return fail('web_selector_required', 'the selector needs exactly one of elementId, text, ariaLabel or css');
      var all;
      if (sel.elementId != null) {
        var el = elementById(String(sel.elementId));
        all = el ? [el] : [];
      } else if (sel.css != null) {
        try { all = Array.prototype.slice.call(document.querySelectorAll(sel.css)); } catch (e) { return fail('invalid_web_selector', 'invalid CSS selector: ' + String(e && e.message || e)); }
      } else {
        all = Array.prototype.slice.call(document.querySelectorAll(CONTROL_QUERY));
      }
      if (all.length > LIMITS.scan) return fail('web_selector_scan_limit', 'the selector would scan ' + all.length + ' elements (limit ' + LIMITS.scan + '); use elementId from web-dom or a narrower css', { details: { scanned: all.length, limit: LIMITS.scan } });
      all = all.filter(function (el) { return matchesFilters(el, sel); });
      if (sel.ariaLabel != null) all = all.filter(function (el) { return attr(el, 'aria-label') === sel.ariaLabel; });
      if (sel.text != null) {
        var want = collapse(sel.text);
        var exact = all.filter(function (el) { return collapse(textOf(el)) === want; });
        if (exact.length) all = exact;
        else {
          var lower = want.toLowerCase();
          all = all.filter(function (el) { return collapse(textOf(el)).toLowerCase().indexOf(lower) >= 0; });
        }
      }
      var visible = all.filter(isVisible);
      if (visible.length === 1) return { ok: true, element: visible[0] };
      if (visible.length > 1) {
        return fail('web_element_ambiguous', visible.length + ' visible elements match the selector; use one of the candidates\' elementId', {
          details: { matches: visible.length, candidates: visible.slice(0, LIMITS.candidates).map(candidate) }
        });
      }
      var details = { matches: 0, hiddenMatches: all.length };
      if (all.length === 1) details.interaction = { status: 'hidden' };
      return fail('web_element_not_found', all.length ? 'the selector matches only hidden elements' : 'no element matches the selector', { details: details });
    }

    var IDENTITY_KEYS = ['elementId', 'tag', 'id', 'name', 'type', 'role', 'ariaLabel', 'placeholder', 'href', 'text'];

    function checkPage(expected) {
      if (!expected || !expected.pageRef) return null;
      var now = pageRef();
      var e = expected.pageRef;
      var same = ['schemaVersion', 'sessionId', 'runtimeEpoch', 'targetId', 'navigationId', 'url'].every(function (k) { return e[k] === now[k]; });
      if (!same) return fail('reobserve_required', 'the page navigated since the observation; observe it again', { details: { expected: e, current: now } });
      return null;
    }

    function checkElement(expected, el) {
      if (!expected || !expected.element) return null;
      var actual = identityOf(el);
      for (var i = 0; i < IDENTITY_KEYS.length; i++) {
        var k = IDENTITY_KEYS[i];
        var want = expected.element[k] === undefined ? null : expected.element[k];
        if (want !== actual[k]) {
          return fail('web_element_changed', 'the element is not the observed one (' + k + ' differs); observe again', { details: { field: k, expected: expected.element, actual: actual } });
        }
      }
      return null;
    }

    // Everything that must hold before permission: same page, same element,
    // visible, enabled, and (for pointer-like actions) ready at its centre.
    function preflight(args, needsReady) {
      var p = checkPage(args.expectedTarget);
      if (p) return p;
      var r = resolve(args.selector);
      if (!r.ok) {
        if (args.expectedTarget && args.selector && args.selector.elementId != null && r.error === 'web_element_not_found' && !(r.details && r.details.hiddenMatches)) {
          return fail('web_element_changed', 'the observed element is no longer in the document; observe again', { details: { expected: args.expectedTarget.element } });
        }
        return r;
      }
      var el = r.element;
      var c = checkElement(args.expectedTarget, el);
      if (c) return c;
      var visible = isVisible(el), disabled = isDisabled(el);
      var interaction = interactionOf(el, visible, disabled);
      if (disabled) return fail('web_element_disabled', 'the element is disabled', { details: { interaction: interaction, resolved: identityOf(el) } });
      if (needsReady && interaction.status === 'outside-viewport') return fail('web_element_outside_viewport', 'the element is outside the viewport; scroll it into view first', { details: { interaction: interaction, resolved: identityOf(el) } });
      if (needsReady && interaction.status === 'obscured') return fail('web_element_obscured', 'another element covers the element\'s centre', { details: { interaction: interaction, resolved: identityOf(el) } });
      return { ok: true, element: el, geometry: rectOf(el), interaction: interaction, identity: identityOf(el) };
    }

    // The final turn: re-resolve and compare with the prepared state.
    function recheck(args, prepared, needsReady) {
      var again = preflight(args, needsReady);
      if (!again.ok) return again;
      if (again.element !== prepared.element) return fail('web_element_changed', 'the selector now resolves to another element', { details: { expected: prepared.identity, actual: again.identity } });
      if (!sameJson(again.geometry, prepared.geometry)) return fail('web_element_changed', 'the element moved before the action could run', { details: { expected: prepared.geometry, actual: again.geometry } });
      return again;
    }

    function resolved(el) { return { pageRef: pageRef(), element: identityOf(el) }; }

    function nextTurn() {
      return new Promise(function (resolveTurn) {
        var done = false;
        var go = function () { if (!done) { done = true; resolveTurn(); } };
        if (typeof requestAnimationFrame === 'function' && typeof document !== 'undefined' && document.visibilityState === 'visible') requestAnimationFrame(function () { setTimeout(go, 0); });
        setTimeout(go, 50);
      });
    }

    // -------------------------------------------------------------- action executor

    // Each executor returns {ok:false,...} before permission (nothing happened) or
    // calls permit() and returns the outcome of the effect.
    var executors = {
      click: function (args, ctx) {
        var prepared = preflight(args, true);
        if (!prepared.ok) return prepared;
        return nextTurn().then(function () {
          var fin = ctx.final(function () { return recheck(args, prepared, true); });
          if (!fin.ok) return fin;
          ctx.permit();
          fin.element.click();
          return { ok: true, resolved: resolved(fin.element), interaction: fin.interaction };
        });
      },
      input: function (args, ctx) {
        if (typeof args.value !== 'string') return fail('invalid_web_input_value', '`value` must be a string');
        var prepared = preflight(args, true);
        if (!prepared.ok) return prepared;
        var el = prepared.element;
        if (!isEditable(el)) return fail('web_element_not_editable', 'the element does not accept text', { details: { resolved: identityOf(el) } });
        return nextTurn().then(function () {
          var fin = ctx.final(function () {
            var f = recheck(args, prepared, true);
            if (!f.ok) return f;
            // Focus handlers may rewrite the page: check again after them.
            if (document.activeElement !== f.element) { try { f.element.focus({ preventScroll: true }); } catch (e) { f.element.focus(); } }
            return recheck(args, prepared, true);
          });
          if (!fin.ok) return fin;
          var target = fin.element;
          ctx.permit();
          var sensitive = isSensitive(target);
          if (target.isContentEditable) {
            var sel = root.getSelection && root.getSelection();
            var done = false;
            if (sel && document.createRange && document.execCommand) {
              var range = document.createRange();
              range.selectNodeContents(target);
              sel.removeAllRanges();
              sel.addRange(range);
              done = args.value === '' ? document.execCommand('delete', false) : document.execCommand('insertText', false, args.value);
            }
            if (!done) { target.textContent = args.value; target.dispatchEvent(new Event('input', { bubbles: true })); }
            var text = target.innerText.replace(/\n$/, '');
            if (text !== args.value) return fail('web_input_rejected', 'the editor did not take the value', { dispatched: true, resolved: resolved(target) });
            return { ok: true, resolved: resolved(target), sensitive: sensitive, valueLength: args.value.length, value: sensitive ? undefined : args.value };
          }
          setNativeValue(target, args.value);
          target.dispatchEvent(new Event('input', { bubbles: true }));
          target.dispatchEvent(new Event('change', { bubbles: true }));
          if (String(target.value) !== args.value) {
            return fail('web_input_rejected', 'the control did not keep the value (type, maxlength or a handler changed it)', { dispatched: true, resolved: resolved(target), valueLength: String(target.value).length });
          }
          var out = { ok: true, resolved: resolved(target), sensitive: sensitive, valueLength: args.value.length };
          if (!sensitive) out.value = args.value;
          return out;
        });
      },
      key: function (args, ctx) {
        if (args.key !== 'Enter' && args.key !== 'Escape') return fail('invalid_web_key', '`key` must be Enter or Escape');
        var prepared = preflight(args, false);
        if (!prepared.ok) return prepared;
        return nextTurn().then(function () {
          var fin = ctx.final(function () { return recheck(args, prepared, false); });
          if (!fin.ok) return fin;
          ctx.permit();
          var ev = new KeyboardEvent('keydown', { key: args.key, code: args.key, bubbles: true, cancelable: true, composed: true });
          var notPrevented = fin.element.dispatchEvent(ev);
          return { ok: true, resolved: resolved(fin.element), key: args.key, eventType: 'keydown', trusted: false, defaultPrevented: !notPrevented };
        });
      },
      scroll: function (args, ctx) {
        var mode = args.mode;
        if (mode !== 'into-view' && mode !== 'by') return fail('invalid_web_scroll_mode', '`mode` must be into-view or by');
        if (mode === 'into-view' && !args.selector) return fail('web_selector_required', 'into-view needs a selector');
        var prepared = null;
        if (args.selector) {
          prepared = preflight(args, false);
          if (!prepared.ok) return prepared;
        } else {
          var p = checkPage(args.expectedTarget);
          if (p) return p;
        }
        return nextTurn().then(function () {
          var el = null;
          if (prepared) {
            var fin = ctx.final(function () { return recheck(args, prepared, false); });
            if (!fin.ok) return fin;
            el = fin.element;
          }
          ctx.permit();
          if (mode === 'into-view') el.scrollIntoView({ block: 'center', inline: 'center', behavior: 'instant' });
          else if (el) el.scrollBy({ left: Number(args.deltaX) || 0, top: Number(args.deltaY) || 0, behavior: 'instant' });
          else root.scrollBy({ left: Number(args.deltaX) || 0, top: Number(args.deltaY) || 0, behavior: 'instant' });
          var out = { ok: true, mode: mode, scrollX: Math.round(root.scrollX), scrollY: Math.round(root.scrollY) };
          if (el) {
            out.resolved = resolved(el);
            out.bounds = rectOf(el);
            out.interaction = interactionOf(el, isVisible(el), isDisabled(el));
          }
          return out;
        });
      },
      waitFor: function (args, ctx) {
        var hasSel = args.selector != null, hasText = args.targetText != null;
        if (hasSel === hasText) return fail('web_selector_required', 'waitFor needs exactly one of selector or targetText');
        var timeout = Math.max(1, Number(args.timeoutMs) || 5000);
        var interval = Math.max(10, Number(args.intervalMs) || 250);
        // A wait has no effect on the app: its outcome is never "dispatched".
        ctx.readOnly();
        var started = now();
        return new Promise(function (done) {
          var tick = function () {
            if (ctx.aborted()) return done(ctx.abortResult());
            if (hasSel) {
              var r = resolve(args.selector);
              if (r.ok) return done({ ok: true, matched: 'selector', resolved: resolved(r.element), elapsedMs: now() - started });
              if (r.error !== 'web_element_not_found' && r.error !== 'web_element_ambiguous') return done(r);
            } else if (document.body && (document.body.innerText || '').indexOf(args.targetText) >= 0) {
              return done({ ok: true, matched: 'text', elapsedMs: now() - started });
            }
            if (now() - started >= timeout) return done(fail('wait_timeout', 'the condition did not hold within ' + timeout + ' ms', { dispatched: false }));
            setTimeout(tick, interval);
          };
          tick();
        });
      },
      state: function (args, ctx) {
        ctx.readOnly();
        var values = {};
        state.stateProviders.forEach(function (fn, name) {
          try { values[name] = jsonClone(fn()); } catch (e) { values[name] = { error: String(e && e.message || e) }; }
        });
        return { ok: true, values: values };
      },
      action: function (args, ctx) {
        var name = args && args.name;
        var fn = state.actions.get(name);
        if (!fn) return fail('action_not_registered', 'no app action named ' + JSON.stringify(String(name)), { details: { registered: Array.from(state.actions.keys()) } });
        ctx.permit();
        return Promise.resolve().then(function () { return fn(args.arguments || {}, { actionId: ctx.actionId }); }).then(function (value) {
          return { ok: true, name: name, value: jsonClone(value) };
        }, function (err) {
          return fail('action_failed', String(err && err.message || err), { dispatched: true });
        });
      }
    };

    function validExecution(p) {
      if (!p || typeof p !== 'object' || !p.command || typeof p.command.name !== 'string') return 'the payload needs command.name';
      var ex = p.execution;
      if (!ex || ex.schemaVersion !== EXECUTION_SCHEMA) return 'execution.schemaVersion must be ' + EXECUTION_SCHEMA;
      if (ex.runtimeEpoch !== runtimeEpoch) return 'execution.runtimeEpoch is not this document';
      if (typeof p.actionId !== 'string' || !p.actionId || ex.actionId !== p.actionId) return 'execution.actionId must equal actionId';
      if (!(typeof ex.timeoutMs === 'number' && Math.floor(ex.timeoutMs) === ex.timeoutMs && ex.timeoutMs > 0)) return 'execution.timeoutMs must be a positive integer';
      var t = p.target || {};
      if (t.sessionId !== sessionId || t.runtimeEpoch !== runtimeEpoch || t.targetId !== TARGET_ID) return 'target is not this page';
      return null;
    }

    function onCommand(msg) {
      var p = msg.payload;
      var invalid = validExecution(p);
      if (invalid) return respond(msg.requestId, fail('invalid_web_execution', invalid, { dispatched: false }));
      var name = p.command.name;
      if (!executors[name]) return respond(msg.requestId, fail('unknown_web_command', 'unknown command ' + JSON.stringify(name), { dispatched: false }));
      if (state.active) return respond(msg.requestId, fail('web_action_busy', 'action ' + state.active.actionId + ' is still running', { dispatched: false }));
      if (state.completions.has(p.actionId) || journalRead()[p.actionId]) return respond(msg.requestId, fail('action_id_reused', 'this actionId was already executed', { dispatched: false }));
      run(msg.requestId, p);
    }

    function run(requestId, p) {
      var actionId = p.actionId;
      var active = { actionId: actionId, requestId: requestId, permitted: false, readOnly: false, aborted: null, finished: false, timer: null };
      state.active = active;
      var abortResult = function () { return fail(active.aborted === 'timeout' ? 'web_action_timeout' : (active.aborted === 'stopped' ? 'web_sdk_stopped' : 'web_action_cancelled'), 'the action was ' + (active.aborted === 'timeout' ? 'not finished within ' + p.execution.timeoutMs + ' ms' : active.aborted)); };
      var ctx = {
        actionId: actionId,
        permit: function () {
          // Permission: from here on the effect may happen, so the outcome is
          // journalled (it survives a reload) and reported only by completion.
          active.permitted = true;
          journalPut(actionId, { state: 'running', actionId: actionId, runtimeEpoch: runtimeEpoch, command: p.command.name, startedAtMs: now() });
          state.currentAction = actionId;
          setTimeout(function () { if (state.currentAction === actionId) state.currentAction = null; }, 0);
        },
        readOnly: function () { active.permitted = true; active.readOnly = true; },
        // Runs the final-turn checks unless the action was aborted meanwhile.
        final: function (check) { return active.aborted ? abortResult() : check(); },
        aborted: function () { return !!active.aborted; },
        abortResult: abortResult
      };
      active.timer = setTimeout(function () { active.aborted = 'timeout'; if (!active.permitted || active.readOnly) finish(abortResult()); else finish(fail('web_action_timeout', 'the action did not finish within ' + p.execution.timeoutMs + ' ms; its effect may still happen', { ambiguous: true })); }, p.execution.timeoutMs);
      active.abort = function (why) { active.aborted = why; if (!active.permitted || active.readOnly) finish(abortResult()); };
      var finish = function (result) {
        if (active.finished) return;
        active.finished = true;
        clearTimeout(active.timer);
        if (state.active === active) state.active = null;
        if (state.currentAction === actionId) state.currentAction = null;
        result = result && typeof result === 'object' ? result : fail('invalid_web_action_result', 'the executor returned no result');
        if (!active.permitted) {
          var refusal = {};
          for (var k in result) refusal[k] = result[k];
          refusal.dispatched = false;
          refusal.actionId = actionId;
          return respond(requestId, refusal);
        }
        complete(actionId, p, result, !active.readOnly);
      };
      var out;
      try { out = executors[p.command.name](p.command.args || {}, ctx); } catch (e) {
        out = fail('web_action_failed', String(e && e.message || e), active.permitted ? { dispatched: true } : null);
      }
      Promise.resolve(out).then(finish, function (e) { finish(fail('web_action_failed', String(e && e.message || e))); });
    }

    function complete(actionId, p, outcome, dispatched) {
      var result = {};
      for (var k in outcome) if (outcome[k] !== undefined) result[k] = outcome[k];
      result.actionId = actionId;
      result.runtimeEpoch = runtimeEpoch;
      result.settled = true;
      result.dispatched = outcome.dispatched === false ? false : dispatched;
      result.ambiguous = outcome.ambiguous === true;
      result.execution = { schemaVersion: EXECUTION_SCHEMA, actionId: actionId, runtimeEpoch: runtimeEpoch, target: p.target, settled: true };
      if (byteLength(safeStringify(result)) > LIMITS.completion) {
        result = { ok: false, error: 'invalid_web_action_result', message: 'the action result exceeds 64 KiB', actionId: actionId, runtimeEpoch: runtimeEpoch, settled: true, dispatched: result.dispatched, ambiguous: false, execution: result.execution };
      }
      state.completions.set(actionId, result);
      journalPut(actionId, { state: 'completed', actionId: actionId, runtimeEpoch: runtimeEpoch, result: result });
      rawSend({ type: 'completion', result: result });
    }

    function onCompletionAck(msg) {
      if (msg.stored !== true) return;
      state.completions.delete(msg.actionId);
      journalDrop(msg.actionId);
    }

    function onCancel(msg) {
      var a = state.active;
      if (!a || !msg.payload || msg.payload.actionId !== a.actionId) return;
      a.abort('cancelled');
    }

    // A document that died mid-action leaves its journal entry behind; the next
    // document of the same session reports it so the host can settle the action.
    function recoverJournal() {
      var j = journalRead();
      Object.keys(j).forEach(function (id) {
        var e = j[id];
        if (!e) return;
        if (e.state === 'completed' && e.result) { state.completions.set(id, e.result); return; }
        if (e.state === 'running') {
          var result = {
            ok: false, error: 'web_action_interrupted',
            message: 'the document running this action unloaded before it finished; its effect is unknown',
            actionId: id, runtimeEpoch: e.runtimeEpoch, settled: true, dispatched: true, ambiguous: true,
            details: { command: e.command, startedAtMs: e.startedAtMs, reportedBy: runtimeEpoch },
            execution: { schemaVersion: EXECUTION_SCHEMA, actionId: id, runtimeEpoch: e.runtimeEpoch, target: { sessionId: sessionId, runtimeEpoch: e.runtimeEpoch, targetId: TARGET_ID }, settled: true }
          };
          state.completions.set(id, result);
          j[id] = { state: 'completed', actionId: id, runtimeEpoch: e.runtimeEpoch, result: result };
        }
      });
      journalWrite(j);
    }

    // -------------------------------------------------------------- UI observation
    // An on-demand lease (100..5000 ms) during which the page samples its UI every
    // 200 ms (plus at start and end) into the `events` stream as
    // `{category:"ui", name:"observation.sample"}` records, then one
    // `observation.end`. One lease at a time; stop needs its leaseId.

    function elapsedMs(t0) { return (root.performance && performance.now ? performance.now() : now()) - t0; }

    function observationStatus() {
      var o = state.observation;
      var active = !!o && !o.ended;
      return {
        ok: true, schemaVersion: OBSERVATION_SCHEMA, mode: 'on-demand', active: active,
        leaseId: o ? o.leaseId : null, durationMs: o ? o.durationMs : null,
        remainingMs: active ? Math.max(0, o.until - now()) : 0,
        maxDurationMs: LIMITS.observationMaxMs, intervalMs: LIMITS.observationIntervalMs,
        sampleCount: o ? o.sampleCount : 0, maxSampleDurationMs: o ? Math.round(o.maxSampleDurationMs * 1000) / 1000 : 0,
        startedAtMs: o ? o.startedAtMs : null, endedAtMs: o ? o.endedAtMs : null, endReason: o ? o.endReason : null,
        target: target()
      };
    }

    function observeSample(o, reason) {
      var t0 = root.performance && performance.now ? performance.now() : now();
      var focused = typeof document !== 'undefined' ? document.activeElement : null;
      var sample = {
        leaseId: o.leaseId, index: o.sampleCount + 1, reason: reason, atMs: now(),
        title: clip(document.title, 1024), url: clip(currentUrl(), 4096), route: currentRoute(), navigationId: doc.navigationId,
        readyState: document.readyState, controlCount: document.querySelectorAll(CONTROL_QUERY).length,
        focused: focused && focused !== document.body && focused.nodeType === 1 ? { elementId: doc.ids.get(focused) || null, tag: tagOf(focused), id: attr(focused, 'id') } : null,
        viewport: { width: root.innerWidth, height: root.innerHeight, scrollX: Math.round(root.scrollX), scrollY: Math.round(root.scrollY) },
        mutations: state.mutationTotal - o.mutationBase,
        bodyTextLength: document.body ? (document.body.innerText || '').length : 0
      };
      o.mutationBase = state.mutationTotal;
      var took = elapsedMs(t0);
      sample.durationMs = Math.round(took * 1000) / 1000;
      o.sampleCount += 1;
      o.maxSampleDurationMs = Math.max(o.maxSampleDurationMs, took);
      var saved = state.currentAction;
      state.currentAction = null;
      record('events', 'ui-observation', { category: 'ui', name: 'observation.sample', leaseId: o.leaseId, sample: sample });
      state.currentAction = saved;
    }

    function endObservation(o, reason) {
      if (o.ended) return;
      if (o.timer) { clearTimeout(o.timer); o.timer = null; }
      if (!state.stopped) observeSample(o, reason);
      o.ended = true;
      o.endedAtMs = now();
      o.endReason = reason;
      if (!state.stopped) record('events', 'ui-observation', { category: 'ui', name: 'observation.end', leaseId: o.leaseId, reason: reason, sampleCount: o.sampleCount, durationMs: o.durationMs });
    }

    function observationTick(o) {
      o.timer = null;
      if (o.ended) return;
      if (now() >= o.until) return endObservation(o, 'expired');
      observeSample(o, 'interval');
      o.timer = setTimeout(function () { observationTick(o); }, Math.min(LIMITS.observationIntervalMs, Math.max(0, o.until - now())));
    }

    function uiObservation(args) {
      var op = args.operation;
      var o = state.observation;
      if (op === 'status') return observationStatus();
      if (op === 'start') {
        var d = args.durationMs;
        if (!(typeof d === 'number' && Math.floor(d) === d && d >= LIMITS.observationMinMs && d <= LIMITS.observationMaxMs)) {
          return fail('invalid_ui_observation_duration', 'durationMs must be an integer from ' + LIMITS.observationMinMs + ' to ' + LIMITS.observationMaxMs, { dispatched: false });
        }
        if (o && !o.ended) return fail('ui_observation_busy', 'an observation lease is active; stop it with its leaseId or wait ' + Math.max(0, o.until - now()) + ' ms', { dispatched: false, details: { remainingMs: Math.max(0, o.until - now()) } });
        o = { leaseId: randomHex32(), durationMs: d, startedAtMs: now(), until: now() + d, sampleCount: 0, maxSampleDurationMs: 0, mutationBase: state.mutationTotal, ended: false, timer: null, endedAtMs: null, endReason: null };
        state.observation = o;
        observeSample(o, 'start');
        o.timer = setTimeout(function () { observationTick(o); }, Math.min(LIMITS.observationIntervalMs, d));
        return observationStatus();
      }
      if (op === 'stop') {
        if (!o || o.leaseId !== args.leaseId) return fail('ui_observation_lease_mismatch', 'leaseId is not the current observation lease', { dispatched: false });
        if (!o.ended) endObservation(o, 'stopped');
        var st = observationStatus();
        st.stopped = o.endReason === 'stopped';
        return st;
      }
      return fail('invalid_ui_observation_operation', 'operation must be start, status or stop', { dispatched: false });
    }

    // -------------------------------------------------------------- reads

    function onRead(msg) {
      var payload = msg.payload || {};
      var args = payload.args || {};
      var result;
      try {
        if (payload.name === 'domSnapshot') {
          var dom = snapshotDom(args);
          result = dom.ok === false ? dom : { ok: true, dom: dom };
        } else if (payload.name === 'captureBarrier') {
          result = barrier(args.stream);
        } else if (payload.name === 'uiObservation') {
          result = uiObservation(args);
        } else {
          result = fail('unknown_web_read', 'unknown read ' + JSON.stringify(payload.name));
        }
      } catch (e) {
        result = fail('web_read_failed', String(e && e.message || e));
      }
      respond(msg.requestId, result);
    }

    // Flush everything queued (UI batches included) so that every record of the
    // stream up to `sequence` is on the socket before this reply.
    function barrier(stream) {
      if (!state.seq.hasOwnProperty(stream)) return fail('invalid_web_capture_stream', 'unknown stream ' + JSON.stringify(stream));
      if (stream === 'events') flushUi(true);
      pump();
      var unsent = state.queue.filter(function (e) { return e.record.stream === stream; }).length;
      return {
        ok: true, schemaVersion: CAPTURE_SCHEMA, stream: stream, sequence: state.seq[stream], losses: state.losses[stream],
        pending: unsent + (stream === 'network' ? state.pendingRequests : 0), target: target()
      };
    }

    // -------------------------------------------------------------- public API

    var bridge = {
      options: options,
      want: want,
      inside: false,
      record: record,
      associate: associate,
      recordNetwork: recordNetwork,
      requestStarted: function () { state.pendingRequests += 1; },
      requestFinished: function () { state.pendingRequests = Math.max(0, state.pendingRequests - 1); }
    };

    var api = {
      sessionId: sessionId,
      runtimeEpoch: runtimeEpoch,
      start: function () {
        if (state.started && !state.stopped) return api;
        state.started = true;
        state.stopped = false;
        hooks.bridge = bridge;
        doc.listeners.push(onNavigation);
        installUiCapture();
        recoverJournal();
        connect();
        return api;
      },
      stop: function () {
        if (state.stopped) return api;
        state.stopped = true;
        if (hooks.bridge === bridge) hooks.bridge = null;
        doc.listeners = doc.listeners.filter(function (l) { return l !== onNavigation; });
        listeners.forEach(function (l) { if (l[0]) l[0].removeEventListener(l[1], l[2], l[3]); else if (l[2] && l[2].disconnect) l[2].disconnect(); });
        listeners = [];
        if (state.active) state.active.abort('stopped');
        if (state.observation && !state.observation.ended) endObservation(state.observation, 'sdk-stopped');
        if (state.timer) { clearTimeout(state.timer); state.timer = null; }
        if (state.socket) { try { state.socket.close(1000, 'stopped'); } catch (e) { /* closing */ } }
        state.status = 'stopped';
        return api;
      },
      recordLog: function (entry, options2) {
        entry = typeof entry === 'string' ? { message: entry } : (entry || {});
        return record('logs', 'app', { level: entry.level || 'info', message: clip(entry.message, LIMITS.logMessage), data: entry.data }, (options2 || {}).actionId || entry.actionId);
      },
      recordNetwork: function (entry, options2) { entry = entry || {}; return record('network', 'app', entry, (options2 || {}).actionId || entry.actionId); },
      recordState: function (name, value, options2) { return record('state', 'app', { name: String(name), value: value }, (options2 || {}).actionId); },
      recordEvent: function (name, data, options2) { return record('events', 'app', { category: 'app', name: String(name), data: data }, (options2 || {}).actionId); },
      registerAction: function (name, fn) {
        if (typeof fn !== 'function') throw new TypeError('registerAction needs a function');
        if (!state.actions.has(name) && state.actions.size >= LIMITS.actions) throw new Error('at most ' + LIMITS.actions + ' actions');
        state.actions.set(String(name), fn);
        return api;
      },
      registerStateProvider: function (name, fn) {
        if (typeof fn !== 'function') throw new TypeError('registerStateProvider needs a function');
        if (!state.stateProviders.has(name) && state.stateProviders.size >= LIMITS.stateProviders) throw new Error('at most ' + LIMITS.stateProviders + ' state providers');
        state.stateProviders.set(String(name), fn);
        return api;
      },
      snapshotDom: function (args) { return snapshotDom(args); },
      pageRef: pageRef,
      transportStatus: function () {
        var losses = 0;
        for (var k in state.losses) losses += state.losses[k];
        return {
          status: state.status, connected: state.status === 'connected', sessionId: sessionId, runtimeEpoch: runtimeEpoch,
          binding: state.binding, lastError: state.lastError, reconnectAttempts: state.attempts, queued: state.queue.length,
          inflight: state.inflight.size, pendingCompletions: state.completions.size, losses: losses, rejected: state.rejected,
          sequences: jsonClone(state.seq), activeAction: state.active ? state.active.actionId : null
        };
      }
    };
    if (typeof root.addEventListener === 'function') {
      // Release the session promptly so the next document is not refused as busy.
      root.addEventListener('pagehide', function () { if (state.socket) { try { state.socket.close(1000, 'pagehide'); } catch (e) { /* closing */ } } });
    }
    return api;
  }

  // `executorRevision`: the executor turns this file offers (web-executor injects
  // the file again when a page carries an older copy).
  return { createAiAppBridge: createAiAppBridge, h5Render: h5Render, PROTOCOL: PROTOCOL, version: '0.1.0', executorRevision: 1 };
});
