// Preloaded (`node --require`) into the reference server, which calls `app.listen(PORT)` with no
// host and so would listen on every interface: a listen given only a port gets 127.0.0.1.
const net = require("node:net");

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  const portOnly = typeof port === "number" || (typeof port === "string" && /^\d+$/.test(port));
  if (portOnly && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
