"""Recording TCP proxy: client -> proxy -> broker; each chunk logged with
its direction, connection number and time as one line:
  <conn> <t_ns> <'>' client->broker | '<' broker->client> <hex>"""
import socket, sys, threading, time

listen_port, target_port, logpath = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
log = open(logpath, "a", buffering=1)
lock = threading.Lock()
n = [0]

def pump(src, dst, conn, arrow):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            with lock:
                log.write(f"{conn} {time.monotonic_ns()} {arrow} {b.hex()}\n")
            dst.sendall(b)
    except OSError:
        pass
    finally:
        try: dst.shutdown(socket.SHUT_WR)
        except OSError: pass

def main():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", listen_port)); s.listen(16)
    while True:
        c, _ = s.accept()
        u = socket.create_connection(("127.0.0.1", target_port))
        n[0] += 1
        for a, b, arrow in ((c, u, ">"), (u, c, "<")):
            threading.Thread(target=pump, args=(a, b, n[0], arrow), daemon=True).start()

main()
