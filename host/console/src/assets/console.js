// The operator console's only script (served from /console/assets). Every page works
// without it; it adds the live inbox: rows for messages as they arrive, from the
// console's own stream of the unit's messages.
"use strict";
(function () {
  var table = document.getElementById("inbox");
  if (!table || !table.dataset.stream || typeof EventSource === "undefined") {
    return;
  }
  var status = document.getElementById("live-status");
  var body = table.tBodies[0];
  var url = table.dataset.stream;
  if (table.dataset.after) {
    url += "?after=" + encodeURIComponent(table.dataset.after);
  }
  var source = new EventSource(url);
  source.onopen = function () {
    if (status) { status.textContent = "Live: new messages appear below as they arrive."; }
  };
  source.onerror = function () {
    if (status) { status.textContent = "The live stream was interrupted; retrying…"; }
  };
  source.onmessage = function (event) {
    var m;
    try { m = JSON.parse(event.data); } catch (e) { return; }
    var row = document.createElement("tr");
    row.className = "fresh";
    var cells = [m.receivedAt, m.connector, m.kind, m.threadKey || "\u2014", m.deliveryId, m.payload];
    cells.forEach(function (text, i) {
      var td = document.createElement("td");
      if (i === 2) { td.className = "kind"; }
      if (i === 2 || i === 4 || i === 5) {
        var code = document.createElement("code");
        code.textContent = String(text);
        td.appendChild(code);
      } else {
        td.textContent = String(text);
      }
      row.appendChild(td);
    });
    // Newest first, as the page lists them.
    body.insertBefore(row, body.firstChild);
  };
})();
