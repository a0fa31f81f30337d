"use strict";
// The Permit handle: a plugin allows or rejects its waiting pods whenever it
// decides, and the decision goes out on the open Permit stream.
Object.defineProperty(exports, "__esModule", { value: true });
exports.makeHandle = makeHandle;
function makeHandle(st, plugin) {
    return {
        plugin,
        allow: (uid) => decide(st, plugin, uid, true, ''),
        reject: (uid, message = '') => decide(st, plugin, uid, false, String(message)),
        waitingPods: () => {
            const out = [];
            for (const w of st.waiting.values())
                if (w.plugins.includes(plugin))
                    out.push(w.pod);
            return out;
        },
    };
}
function decide(st, plugin, uid, allow, message) {
    const w = st.waiting.get(uid);
    if (!w)
        return false;
    const i = w.plugins.indexOf(plugin);
    if (i < 0)
        return false;
    w.plugins.splice(i, 1);
    if (!allow || w.plugins.length === 0)
        st.waiting.delete(uid);
    const sink = st.permitSink;
    if (!sink)
        return false;
    sink({
        requestId: 0,
        status: null,
        generation: 0,
        timeoutMillis: 0,
        decision: { podUid: uid, plugin, allow, message },
    });
    return true;
}
