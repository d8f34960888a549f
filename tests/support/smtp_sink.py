#!/usr/bin/python3
"""A real SMTP server for the test suite (aiosmtpd).

Binds 127.0.0.1 on a port the kernel picks and prints `PORT <n>` on stdout
once it accepts connections. Every accepted message is parsed with Python's
email module and written as one JSON file to --dir (written to a temporary
name, then renamed, so a reader never sees half a file).

Options:
  --tls none|starttls|tls   plain SMTP, STARTTLS required, or implicit TLS
  --cert FILE --key FILE    the server certificate (PEM) for starttls/tls
  --user U --password P     require AUTH (PLAIN/LOGIN) with these credentials
  --fail-code 451|550 --fail-count N
                            answer the DATA of the next N messages with that code
"""

import argparse
import asyncio
import email
import email.policy
import json
import os
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword

FAIL_REPLIES = {
    421: "421 4.3.2 Service shutting down",
    450: "450 4.2.0 Mailbox unavailable, try again",
    451: "451 4.3.0 Temporary local problem, try again later",
    452: "452 4.3.1 Insufficient system storage",
    550: "550 5.7.1 Message rejected by policy",
    552: "552 5.3.4 Message too big",
    554: "554 5.6.0 Transaction failed",
}


class Handler:
    def __init__(self, out_dir, fail_code, fail_count):
        self.out_dir = out_dir
        self.fail_code = fail_code
        self.fail_count = fail_count
        self.seq = 0
        self.rejected = 0

    async def handle_DATA(self, server, session, envelope):
        if self.fail_count > 0:
            self.fail_count -= 1
            self.rejected += 1
            return FAIL_REPLIES[self.fail_code]
        raw = envelope.original_content or envelope.content
        if isinstance(raw, str):
            raw = raw.encode("utf-8", "surrogateescape")
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        headers = {}
        for name, value in msg.items():
            headers.setdefault(name.lower(), []).append(str(value))
        text = msg.get_body(preferencelist=("plain",))
        html = msg.get_body(preferencelist=("html",))
        transport = server.transport
        implicit_tls = (
            transport is not None and transport.get_extra_info("ssl_object") is not None
        )
        record = {
            "mail_from": envelope.mail_from,
            "rcpt_tos": list(envelope.rcpt_tos),
            "data": raw.decode("utf-8", "replace"),
            "headers": headers,
            "subject": str(msg["subject"]) if msg["subject"] is not None else None,
            "text": text.get_content() if text is not None else None,
            "html": html.get_content() if html is not None else None,
            "tls": session.ssl is not None or implicit_tls,
            "auth_user": session.auth_data if session.authenticated else None,
        }
        self.seq += 1
        name = os.path.join(self.out_dir, "%06d.json" % self.seq)
        with open(name + ".tmp", "w", encoding="utf-8") as f:
            json.dump(record, f)
        os.rename(name + ".tmp", name)
        return "250 2.0.0 OK queued as %d" % self.seq


def make_authenticator(user, password):
    def authenticator(server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login == user.encode()
            and auth_data.password == password.encode()
        )
        if ok:
            return AuthResult(success=True, auth_data=user)
        return AuthResult(success=False, handled=False)

    return authenticator


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--tls", choices=["none", "starttls", "tls"], default="none")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--user")
    p.add_argument("--password")
    p.add_argument("--fail-code", type=int, choices=sorted(FAIL_REPLIES), default=451)
    p.add_argument("--fail-count", type=int, default=0)
    args = p.parse_args()

    context = None
    if args.tls != "none":
        if not (args.cert and args.key):
            sys.exit("--tls %s needs --cert and --key" % args.tls)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.cert, args.key)

    handler = Handler(args.dir, args.fail_code, args.fail_count)
    smtp_kwargs = {"hostname": "sink.test", "timeout": 30}
    if args.tls == "starttls":
        smtp_kwargs.update(tls_context=context, require_starttls=True)
    if args.user is not None:
        smtp_kwargs.update(
            authenticator=make_authenticator(args.user, args.password or ""),
            auth_required=True,
            # aiosmtpd only knows STARTTLS as TLS; under implicit TLS the
            # connection is encrypted already.
            auth_require_tls=args.tls == "starttls",
        )

    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)

    def factory():
        return SMTP(handler, loop=loop, **smtp_kwargs)

    server = loop.run_until_complete(
        loop.create_server(
            factory,
            host="127.0.0.1",
            port=0,
            ssl=context if args.tls == "tls" else None,
        )
    )
    port = server.sockets[0].getsockname()[1]
    print("PORT %d" % port, flush=True)
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    main()
