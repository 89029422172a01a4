// Preloaded with `node --require` into a server we did not write: a listen() given only a
// port binds 127.0.0.1 instead of every interface, so a test server is never reachable
// from outside this machine.
"use strict";
const net = require("node:net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if ((typeof args[0] === "number" || typeof args[0] === "string") &&
      (args.length === 1 || typeof args[1] === "function")) {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
