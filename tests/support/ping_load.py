"""Ping load from Python's own HTTP client (urllib), for tests that break the
server's disk or database while pings arrive.

    ping_load.py BASE_URL STOP_FILE CLIENTS UUID...

Each of CLIENTS threads pings the checks one request at a time
(GET BASE_URL/ping/<uuid>?items=<n>, every n used once) until STOP_FILE
exists, then one line of JSON per ping goes to stdout:
{"uuid": …, "items": n, "status": 200 | 503 | … | 0 (no HTTP answer),
"sent": seconds since the epoch when the request was about to be sent,
"at": … when the answer came, "error": "…"}.
"""

import itertools
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request


def main():
    base, stop_file, clients = sys.argv[1], sys.argv[2], int(sys.argv[3])
    uuids = sys.argv[4:]
    counter = itertools.count(1)
    lock = threading.Lock()
    results = []
    # No proxy from the environment: the server is on loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def client(c):
        i = c
        while not os.path.exists(stop_file):
            uuid = uuids[i % len(uuids)]
            i += clients
            with lock:
                items = next(counter)
            url = f"{base}/ping/{uuid}?items={items}"
            error = ""
            sent = time.time()
            try:
                with opener.open(url, timeout=30) as r:
                    r.read()
                    status = r.status
            except urllib.error.HTTPError as e:
                status = e.code
                error = e.read().decode("utf-8", "replace")
            except Exception as e:  # no HTTP answer at all
                status = 0
                error = repr(e)
            with lock:
                results.append(
                    {"uuid": uuid, "items": items, "status": status,
                     "sent": sent, "at": time.time(), "error": error})
            if status != 200:
                time.sleep(0.01)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
