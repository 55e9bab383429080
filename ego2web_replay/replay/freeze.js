// ego2web-replay determinism freeze: a virtual page clock and seeded randomness.
//
// Installed before any page script (Playwright add_init_script, or inlined as
// the first <script> of archived HTML). Python fills in CONFIG (see freeze.py).
//
// The clock is VIRTUAL: it never reads the real clock. It starts at the
// capture time and advances only
//   * by CONFIG.stepUs microseconds on every read (Date.now, new Date(),
//     Date(), performance.now), so time is strictly increasing and busy-wait
//     loops end;
//   * to the due time of a setTimeout/setInterval callback when it runs
//     (a callback scheduled for 300 ms later sees the clock 300 ms later, so
//     debouncers and timeouts behave);
//   * by one 60 Hz frame (16.667 ms) per animation frame, so JS animations
//     finish.
// Two replays of the same trajectory thus read the same times, whatever the
// machine's speed. Math.random, crypto.getRandomValues and crypto.randomUUID
// draw from one sfc32 generator seeded from CONFIG.seed.
(function () {
  "use strict";
  var CONFIG = /*@EGO2WEB_FREEZE_CONFIG@*/ { timeMs: 0, seed: 0, stepUs: 1 };
  var g = typeof globalThis !== "undefined" ? globalThis : self;
  if (g.__ego2webFreeze) {
    return;
  }
  Object.defineProperty(g, "__ego2webFreeze", { value: { timeMs: CONFIG.timeMs, seed: CONFIG.seed, settle: null },
    enumerable: false });

  // ---- seeded generator: splitmix32 expands the seed, sfc32 draws ----------
  function splitmix32(state) {
    return function () {
      state = (state + 0x9e3779b9) | 0;
      var z = state;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
  }
  var expand = splitmix32(CONFIG.seed | 0);
  var a = expand(), b = expand(), c = expand(), d = expand();
  function next32() {
    var t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return t >>> 0;
  }
  for (var warm = 0; warm < 12; warm++) {
    next32();
  }

  Math.random = function random() {
    var hi = next32() >>> 5; // 27 bits
    var lo = next32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992; // 53-bit fraction in [0, 1)
  };

  // ---- virtual clock ---------------------------------------------------------
  var originMs = CONFIG.timeMs;
  var elapsedUs = 0; // microseconds since the capture time, an integer
  var stepUs = Math.max(0, CONFIG.stepUs | 0);
  function readUs() {
    var v = elapsedUs;
    elapsedUs += stepUs;
    return v;
  }
  function advanceToUs(us) {
    if (us > elapsedUs) {
      elapsedUs = us;
    }
  }
  function nowMs() {
    return originMs + Math.floor(readUs() / 1000);
  }

  var RealDate = g.Date;
  function Date(year, month, day, hours, minutes, seconds, ms) {
    if (!new.target) {
      return new RealDate(nowMs()).toString();
    }
    var args = arguments.length === 0 ? [nowMs()] : Array.prototype.slice.call(arguments);
    return Reflect.construct(RealDate, args, new.target);
  }
  Date.prototype = RealDate.prototype;
  Date.now = function now() {
    return nowMs();
  };
  Date.parse = RealDate.parse;
  Date.UTC = RealDate.UTC;
  Object.defineProperty(RealDate.prototype, "constructor", { value: Date, writable: true, configurable: true });
  Object.defineProperty(g, "Date", { value: Date, writable: true, configurable: true, enumerable: false });

  var perfProto = g.Performance && g.Performance.prototype;
  if (perfProto) {
    Object.defineProperty(perfProto, "now", {
      value: function now() {
        return readUs() / 1000;
      },
      writable: true,
      configurable: true,
    });
    Object.defineProperty(perfProto, "timeOrigin", {
      get: function () {
        return originMs;
      },
      configurable: true,
    });
  }

  if (g.Intl && g.Intl.DateTimeFormat) {
    var dtf = g.Intl.DateTimeFormat.prototype;
    var formatGetter = Object.getOwnPropertyDescriptor(dtf, "format");
    var realFormatToParts = dtf.formatToParts;
    if (formatGetter && formatGetter.get) {
      Object.defineProperty(dtf, "format", {
        get: function () {
          var bound = formatGetter.get.call(this);
          return function (date) {
            return bound(date === undefined ? nowMs() : date);
          };
        },
        configurable: true,
      });
    }
    if (realFormatToParts) {
      dtf.formatToParts = function formatToParts(date) {
        return realFormatToParts.call(this, date === undefined ? nowMs() : date);
      };
    }
  }

  // ---- timers and frames move the clock to their due time --------------------
  var realSetTimeout = g.setTimeout;
  var realSetInterval = g.setInterval;
  function delayUs(delay) {
    var ms = Number(delay);
    return ms > 0 ? Math.round(ms * 1000) : 0;
  }
  var realClearTimeout = g.clearTimeout;
  var pendingTimers = {}; // real timer id -> {id, due, run, done}: one-shot timers not yet run
  if (realSetTimeout) {
    g.setTimeout = function setTimeout(handler, delay) {
      if (typeof handler !== "function") {
        return realSetTimeout.apply(g, arguments);
      }
      var extra = Array.prototype.slice.call(arguments, 2);
      var entry = { id: 0, due: elapsedUs + delayUs(delay), done: false, run: null };
      entry.run = function () {
        if (entry.done) {
          return undefined;
        }
        entry.done = true;
        delete pendingTimers[entry.id];
        advanceToUs(entry.due);
        return handler.apply(g, extra);
      };
      entry.id = realSetTimeout.call(g, entry.run, delay);
      pendingTimers[entry.id] = entry;
      return entry.id;
    };
    if (realClearTimeout) {
      g.clearTimeout = function clearTimeout(id) {
        var entry = pendingTimers[id];
        if (entry) {
          entry.done = true;
          delete pendingTimers[id];
        }
        return realClearTimeout.call(g, id);
      };
    }
  }
  if (realSetInterval) {
    g.setInterval = function setInterval(handler, delay) {
      if (typeof handler !== "function") {
        return realSetInterval.apply(g, arguments);
      }
      var extra = Array.prototype.slice.call(arguments, 2);
      var period = delayUs(delay);
      var due = elapsedUs + period;
      return realSetInterval.call(g, function () {
        advanceToUs(due);
        due += period;
        return handler.apply(g, extra);
      }, delay);
    };
  }
  var realRAF = g.requestAnimationFrame;
  var FRAME_US = 16667;
  var lastRealFrame = null;
  var frameUs = 0;
  var pendingFrames = {}; // real frame id -> {id, cb, done}
  var runFrame = null;
  if (realRAF) {
    var realCancelRAF = g.cancelAnimationFrame;
    g.requestAnimationFrame = function requestAnimationFrame(callback) {
      var entry = { id: 0, cb: callback, done: false };
      entry.id = realRAF.call(g, function (realTimestamp) {
        if (entry.done) {
          return undefined;
        }
        entry.done = true;
        delete pendingFrames[entry.id];
        if (realTimestamp !== lastRealFrame) {
          lastRealFrame = realTimestamp;
          advanceToUs(frameUs + FRAME_US);
          frameUs = elapsedUs;
        }
        return callback(frameUs / 1000);
      });
      pendingFrames[entry.id] = entry;
      return entry.id;
    };
    if (realCancelRAF) {
      g.cancelAnimationFrame = function cancelAnimationFrame(id) {
        var entry = pendingFrames[id];
        if (entry) {
          entry.done = true;
          delete pendingFrames[id];
        }
        return realCancelRAF.call(g, id);
      };
    }
    runFrame = function () {
      // one virtual frame: every callback requested so far, with one timestamp
      var ids = Object.keys(pendingFrames);
      advanceToUs(frameUs + FRAME_US);
      frameUs = elapsedUs;
      lastRealFrame = null;
      for (var i = 0; i < ids.length; i++) {
        var entry = pendingFrames[ids[i]];
        if (!entry || entry.done) {
          continue;
        }
        entry.done = true;
        delete pendingFrames[ids[i]];
        if (realCancelRAF) {
          realCancelRAF.call(g, entry.id);
        }
        try {
          entry.cb(frameUs / 1000);
        } catch (err) {
          /* a failing callback fails as it would have */
        }
      }
    };
  }

  // ---- settle: run what is pending now, in virtual time --------------------------
  // Before a screenshot the driver calls __ego2webFreeze.settle(): one-shot timers due within
  // horizonMs and pending animation frames run now, in due order, advancing the virtual clock, so
  // a smooth-scroll loop or a JS animation has finished whatever the machine's load was.
  function settle(horizonMs, maxSteps) {
    var limit = elapsedUs + Math.round((horizonMs === undefined ? 1000 : horizonMs) * 1000);
    var budget = maxSteps === undefined ? 5000 : maxSteps;
    var steps = 0;
    while (steps < budget) {
      var next = null;
      for (var key in pendingTimers) {
        var e = pendingTimers[key];
        if (!next || e.due < next.due) {
          next = e;
        }
      }
      var framesPending = runFrame && Object.keys(pendingFrames).length > 0;
      var frameDue = frameUs + FRAME_US;
      if (framesPending && (!next || next.due > frameDue)) {
        if (frameDue > limit) {
          break;
        }
        runFrame();
      } else if (next && next.due <= limit) {
        if (realClearTimeout) {
          realClearTimeout.call(g, next.id);
        }
        try {
          next.run();
        } catch (err) {
          /* as above */
        }
      } else {
        break;
      }
      steps++;
    }
    return steps;
  }
  g.__ego2webFreeze.settle = settle;

  // ---- cookies a page sets: their lifetime in the browser's own time ------------------
  // A script that sets `expires=` from the virtual clock (the capture time) would have the browser,
  // whose cookie jar runs on the real clock, drop the cookie as expired on arrival (a consent choice
  // that never sticks). The same lifetime is added as `max-age` (seconds from the virtual now), which
  // the browser counts from its own clock and which wins over `expires`; a past date still deletes.
  // Nothing is read from the real clock. A cookie given `max-age` by the page is left as it is.
  var docProto = g.Document && g.Document.prototype;
  var cookieDesc = docProto && Object.getOwnPropertyDescriptor(docProto, "cookie");
  if (cookieDesc && cookieDesc.get && cookieDesc.set) {
    var realCookieSet = cookieDesc.set;
    Object.defineProperty(docProto, "cookie", {
      get: cookieDesc.get,
      set: function (value) {
        var text = String(value);
        var expires = /;\s*expires\s*=\s*([^;]*)/i.exec(text);
        if (expires && !/;\s*max-age\s*=/i.test(text)) {
          var when = RealDate.parse(expires[1]);
          if (!isNaN(when)) {
            var virtualNow = originMs + Math.floor(elapsedUs / 1000); // read without moving the clock
            text += "; max-age=" + Math.floor((when - virtualNow) / 1000);
          }
        }
        realCookieSet.call(this, text);
      },
      configurable: true,
      enumerable: cookieDesc.enumerable,
    });
  }

  // ---- crypto draws from the same generator --------------------------------------
  var cryptoProto = g.Crypto && g.Crypto.prototype;
  function fillBytes(bytes) {
    for (var i = 0; i < bytes.length; i += 4) {
      var r = next32();
      for (var j = 0; j < 4 && i + j < bytes.length; j++) {
        bytes[i + j] = (r >>> (8 * j)) & 255;
      }
    }
  }
  if (cryptoProto && cryptoProto.getRandomValues) {
    var realGetRandomValues = cryptoProto.getRandomValues;
    var INTEGER_ARRAYS = ["Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
      "Int32Array", "Uint32Array", "BigInt64Array", "BigUint64Array"];
    cryptoProto.getRandomValues = function getRandomValues(array) {
      var tag = Object.prototype.toString.call(array).slice(8, -1);
      if (!(this instanceof g.Crypto) || INTEGER_ARRAYS.indexOf(tag) < 0 || array.byteLength > 65536) {
        return realGetRandomValues.call(this, array); // the native call throws the proper error
      }
      fillBytes(new Uint8Array(array.buffer, array.byteOffset, array.byteLength));
      return array;
    };
  }
  if (cryptoProto && cryptoProto.randomUUID) {
    cryptoProto.randomUUID = function randomUUID() {
      var b = new Uint8Array(16);
      fillBytes(b);
      b[6] = (b[6] & 0x0f) | 0x40;
      b[8] = (b[8] & 0x3f) | 0x80;
      var hex = [];
      for (var i = 0; i < 16; i++) {
        hex.push((b[i] + 0x100).toString(16).slice(1));
      }
      return hex.slice(0, 4).join("") + "-" + hex.slice(4, 6).join("") + "-" + hex.slice(6, 8).join("") + "-" +
        hex.slice(8, 10).join("") + "-" + hex.slice(10, 16).join("");
    };
  }
})();
