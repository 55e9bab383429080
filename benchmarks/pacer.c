/* pacer: an open-loop HTTP/1.1 load client for latency at a set request rate.
 *
 * Each of C keep-alive connections sends a request every C/R seconds (R: the
 * total rate), the connections' schedules evenly interleaved, so requests
 * arrive one every 1/R seconds instead of in bursts. A connection has one
 * request in flight at most; when an answer comes late, the next request is
 * sent as soon as it can be, and its latency is counted from when it was due
 * (not from when it left), so a stall in the server shows in every request it
 * delayed ("coordinated omission" corrected, as wrk2 does). Timing is by a
 * timerfd on CLOCK_MONOTONIC (microseconds), not by epoll's milliseconds.
 *
 * Usage: pacer PORT URLS_FILE CONNS RATE SECONDS [WARMUP_SECONDS]
 * URLS_FILE: one absolute URL per line, sent through the proxy on
 * 127.0.0.1:PORT in absolute form with the URL's Host, in turn.
 * Answers must carry Content-Length (no chunked bodies).
 * Prints one line:
 *   pacer-result REQUESTS SECONDS P50_US P90_US P99_US P999_US MAX_US ERRORS LATE
 * LATE: requests sent more than 1 ms after they were due.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAXC 256
#define BUF (1 << 20)

typedef struct {
    int fd;
    int busy;          /* a request is in flight */
    int64_t due;       /* when the next request is (or the one in flight was) due, ns */
    size_t have;       /* bytes of the current answer read */
    long need;         /* total bytes of the answer once its head is read; -1 before */
    char *buf;
} conn_t;

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void die(const char *what) {
    perror(what);
    exit(2);
}

static char **reqs;
static size_t *reqlen;
static size_t nreq, next_req;

static void load_urls(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    char line[8192];
    size_t cap = 1024;
    reqs = malloc(cap * sizeof *reqs);
    reqlen = malloc(cap * sizeof *reqlen);
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!*line) continue;
        const char *h = strstr(line, "://");
        if (!h) continue;
        h += 3;
        size_t hl = strcspn(h, "/?");
        if (nreq == cap) {
            cap *= 2;
            reqs = realloc(reqs, cap * sizeof *reqs);
            reqlen = realloc(reqlen, cap * sizeof *reqlen);
        }
        char *r = malloc(strlen(line) + hl + 64);
        int n = sprintf(r, "GET %s HTTP/1.1\r\nHost: %.*s\r\nAccept: */*\r\n\r\n", line, (int)hl, h);
        reqs[nreq] = r;
        reqlen[nreq++] = (size_t)n;
    }
    fclose(f);
    if (!nreq) {
        fprintf(stderr, "pacer: no URLs in %s\n", path);
        exit(2);
    }
}

static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno != EINPROGRESS) die("connect");
    return fd;
}

/* Bytes of the whole answer once its head is in buf, else -1 (or -2: no Content-Length). */
static long answer_size(const char *buf, size_t have) {
    const char *end = memmem(buf, have, "\r\n\r\n", 4);
    if (!end) return -1;
    size_t head = (size_t)(end - buf) + 4;
    const char *p = buf;
    while (p < end) {
        const char *eol = memmem(p, (size_t)(end - p) + 2, "\r\n", 2);
        if (!eol) break;
        if ((size_t)(eol - p) > 15 && strncasecmp(p, "content-length:", 15) == 0)
            return (long)head + strtol(p + 15, NULL, 10);
        p = eol + 2;
    }
    return -2;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: pacer PORT URLS_FILE CONNS RATE SECONDS [WARMUP_SECONDS]\n");
        return 2;
    }
    int port = atoi(argv[1]);
    load_urls(argv[2]);
    int nc = atoi(argv[3]);
    double rate = atof(argv[4]), secs = atof(argv[5]), warm = argc > 6 ? atof(argv[6]) : 0;
    if (nc < 1 || nc > MAXC || rate <= 0 || secs <= 0) {
        fprintf(stderr, "pacer: CONNS must be 1-%d, RATE and SECONDS above 0\n", MAXC);
        return 2;
    }
    int64_t period = (int64_t)(1e9 * nc / rate);
    int ep = epoll_create1(0), tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    if (ep < 0 || tfd < 0) die("epoll/timerfd");
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = MAXC};
    epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
    static conn_t c[MAXC];
    int64_t start = now_ns() + 200000000LL; /* 200 ms for the connections to open */
    int64_t measure_from = start + (int64_t)(warm * 1e9), stop = measure_from + (int64_t)(secs * 1e9);
    for (int i = 0; i < nc; i++) {
        c[i].fd = dial(port);
        c[i].buf = malloc(BUF);
        c[i].due = start + period * i / nc;
        c[i].need = -1;
        ev.events = EPOLLIN;
        ev.data.u32 = (uint32_t)i;
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
    }
    size_t cap = (size_t)(rate * (secs + 1)) + 1024, n = 0;
    int64_t *lat = malloc(cap * sizeof *lat);
    long errors = 0, late = 0;
    struct epoll_event evs[MAXC + 1];
    for (;;) {
        int64_t t = now_ns();
        int64_t next = INT64_MAX;
        int open = 0;
        for (int i = 0; i < nc; i++) {
            if (c[i].fd < 0) continue;
            if (!c[i].busy) {
                if (c[i].due >= stop) {
                    close(c[i].fd);
                    c[i].fd = -1;
                    continue;
                }
                if (c[i].due <= t) {
                    size_t k = next_req++ % nreq;
                    if (write(c[i].fd, reqs[k], reqlen[k]) != (ssize_t)reqlen[k]) {
                        errors++;
                        close(c[i].fd);
                        c[i].fd = -1;
                        continue;
                    }
                    if (t - c[i].due > 1000000 && c[i].due >= measure_from) late++;
                    c[i].busy = 1;
                    c[i].have = 0;
                    c[i].need = -1;
                } else if (c[i].due < next) {
                    next = c[i].due;
                }
            }
            open++;
        }
        if (!open) break;
        if (next != INT64_MAX) {
            struct itimerspec its = {.it_value = {.tv_sec = next / 1000000000LL, .tv_nsec = next % 1000000000LL}};
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        }
        int m = epoll_wait(ep, evs, MAXC + 1, 1000);
        if (m < 0 && errno != EINTR) die("epoll_wait");
        for (int e = 0; e < m; e++) {
            uint32_t i = evs[e].data.u32;
            if (i == MAXC) {
                uint64_t x;
                if (read(tfd, &x, sizeof x) < 0 && errno != EAGAIN) die("timerfd");
                continue;
            }
            conn_t *k = &c[i];
            if (k->fd < 0) continue;
            ssize_t got = read(k->fd, k->buf + k->have, BUF - k->have);
            if (got <= 0) {
                if (got < 0 && errno == EAGAIN) continue;
                errors++;
                close(k->fd);
                k->fd = -1;
                continue;
            }
            k->have += (size_t)got;
            if (k->need < 0) {
                k->need = answer_size(k->buf, k->have);
                if (k->need == -2 || k->need > BUF) {
                    fprintf(stderr, "pacer: an answer without Content-Length, or over 1 MiB\n");
                    return 2;
                }
            }
            if (k->need >= 0 && k->have >= (size_t)k->need) {
                int64_t done = now_ns();
                if (k->due >= measure_from) {
                    if (n == cap) {
                        cap *= 2;
                        lat = realloc(lat, cap * sizeof *lat);
                    }
                    lat[n++] = done - k->due;
                    if (strncmp(k->buf + 9, "200", 3) != 0) errors++;
                }
                k->busy = 0;
                k->due += period;
            }
        }
    }
    if (!n) {
        fprintf(stderr, "pacer: no answers measured\n");
        return 1;
    }
    qsort(lat, n, sizeof *lat, cmp64);
#define PCT(p) (lat[(size_t)((p) * (double)(n - 1))] / 1000.0)
    printf("pacer-result %zu %.3f %.1f %.1f %.1f %.1f %.1f %ld %ld\n", n, secs, PCT(0.5), PCT(0.9), PCT(0.99),
           PCT(0.999), lat[n - 1] / 1000.0, errors, late);
    return 0;
}
