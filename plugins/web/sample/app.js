/*
 * aab sample app — shared page script. It reads the bridge configuration from the
 * URL fragment once (#endpoint=…&token=…&session=…), keeps it in sessionStorage
 * for the other pages, removes it from the address bar, and starts the Web SDK.
 * Each page then adds its own behaviour through `window.sampleApp.ready(fn)`.
 */
(function () {
  'use strict';
  var KEY = 'aab_sample_config';
  var config = {};
  try { config = JSON.parse(sessionStorage.getItem(KEY) || '{}') || {}; } catch (e) { config = {}; }
  var fragment = new URLSearchParams(location.hash.replace(/^#/, ''));
  var changed = false;
  ['endpoint', 'token', 'session'].forEach(function (k) {
    if (fragment.get(k)) { config[k] = fragment.get(k); changed = true; }
  });
  if (changed) {
    sessionStorage.setItem(KEY, JSON.stringify(config));
    // The token must not linger in the URL (it would travel in captures and history).
    history.replaceState(null, '', location.pathname + location.search);
  }
  if (!config.endpoint) config.endpoint = 'ws://' + location.host + '/ai-app-bridge-web';

  var bridge = AiAppBridgeWeb.createAiAppBridge({
    endpoint: config.endpoint,
    token: config.token,
    sessionId: config.session || undefined,
    appName: 'aab sample app',
    captureRequestBodies: true,
    captureResponseBodies: true
  });

  // An app action that takes a while (used to show unresolved actions).
  bridge.registerAction('slowSave', function (args) {
    var delay = Math.max(0, Number(args && args.delayMs) || 3000);
    return new Promise(function (resolve) {
      setTimeout(function () {
        document.body.setAttribute('data-slow-save', 'done');
        resolve({ saved: true, delayMs: delay });
      }, delay);
    });
  });
  bridge.registerStateProvider('page', function () {
    return { path: location.pathname, title: document.title };
  });
  bridge.start();

  function badge() {
    var el = document.getElementById('bridge-status');
    if (!el) return;
    var s = bridge.transportStatus();
    // Touch the DOM only on change, so an idle page stays quiet.
    if (el.getAttribute('data-status') === s.status) return;
    el.textContent = 'Bridge: ' + s.status;
    el.setAttribute('data-status', s.status);
  }
  setInterval(badge, 500);

  var readyFns = [];
  window.sampleApp = {
    bridge: bridge,
    ready: function (fn) { readyFns.push(fn); }
  };
  document.addEventListener('DOMContentLoaded', function () {
    badge();
    readyFns.forEach(function (fn) { fn(bridge); });
  });
})();
