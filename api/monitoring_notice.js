// Shows what ballet answered to the dashboard's buttons. asynqmon's pages
// send each action as an XMLHttpRequest (axios) and show no error text, so
// a refused action would look like nothing happened: this shows the reason
// ballet gave (its JSON "message", and per task of a selection) or what the
// action did to the turns (the Ballet-Notice header), in a banner at the
// top of the page until it is closed or the next action.
(function () {
  var api = (window.FLAG_ROOT_PATH || "") + "/api/";
  var open = XMLHttpRequest.prototype.open;
  var send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.open = function (method, url) {
    var path = String(url);
    this.balletAction = String(method).toUpperCase() !== "GET" &&
      (path.indexOf(api) === 0 || path.indexOf(location.origin + api) === 0);
    return open.apply(this, arguments);
  };
  XMLHttpRequest.prototype.send = function () {
    if (this.balletAction) {
      this.addEventListener("loadend", function () { report(this); });
    }
    return send.apply(this, arguments);
  };

  function report(xhr) {
    var body = null;
    try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
    var lines = [];
    if (xhr.status >= 400 || xhr.status === 0) {
      lines.push((body && body.message) || xhr.responseText || "The action failed (no answer).");
    } else {
      var notice = xhr.getResponseHeader("Ballet-Notice");
      if (notice) lines.push(notice);
    }
    if (body && body.errors && body.errors.length) {
      for (var i = 0; i < body.errors.length; i++) {
        lines.push(body.errors[i].id + ": " + body.errors[i].message);
      }
    }
    show(lines, xhr.status >= 400 || xhr.status === 0 || (body && body.errors && body.errors.length > 0));
  }

  function show(lines, failed) {
    var old = document.getElementById("ballet-notice");
    if (old) old.parentNode.removeChild(old);
    if (!lines.length) return;
    var box = document.createElement("div");
    box.id = "ballet-notice";
    box.setAttribute("role", failed ? "alert" : "status");
    box.style.cssText = "position:fixed;top:8px;left:50%;transform:translateX(-50%);z-index:2000;" +
      "max-width:44rem;padding:10px 40px 10px 14px;border-radius:4px;font:14px/1.45 system-ui,sans-serif;" +
      "box-shadow:0 2px 8px rgba(0,0,0,.3);white-space:pre-line;" +
      (failed ? "background:#fdecea;color:#5f2120;border-left:4px solid #b3261e;"
        : "background:#edf7ed;color:#1e4620;border-left:4px solid #2e7d32;");
    box.textContent = lines.join("\n");
    var close = document.createElement("button");
    close.type = "button";
    close.setAttribute("aria-label", "Close");
    close.textContent = "\u00d7";
    close.style.cssText = "position:absolute;top:4px;right:6px;border:0;background:none;font-size:20px;cursor:pointer;color:inherit";
    close.onclick = function () { box.parentNode.removeChild(box); };
    box.appendChild(close);
    document.body.appendChild(box);
  }
})();
