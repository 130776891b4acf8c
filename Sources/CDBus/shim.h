// libdbus for Swift. The DBUS_TYPE_* and other constants are macros, which Swift cannot
// import, so they are re-exported here as `gw_` constants. Also the start of a private
// dbus-daemon, which needs code between fork and exec.
#ifndef GATTWAY_CDBUS_SHIM_H
#define GATTWAY_CDBUS_SHIM_H
#include <dbus/dbus.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const int GW_DBUS_TYPE_INVALID = DBUS_TYPE_INVALID;
static const int GW_DBUS_TYPE_BYTE = DBUS_TYPE_BYTE;
static const int GW_DBUS_TYPE_BOOLEAN = DBUS_TYPE_BOOLEAN;
static const int GW_DBUS_TYPE_INT16 = DBUS_TYPE_INT16;
static const int GW_DBUS_TYPE_UINT16 = DBUS_TYPE_UINT16;
static const int GW_DBUS_TYPE_INT32 = DBUS_TYPE_INT32;
static const int GW_DBUS_TYPE_UINT32 = DBUS_TYPE_UINT32;
static const int GW_DBUS_TYPE_INT64 = DBUS_TYPE_INT64;
static const int GW_DBUS_TYPE_UINT64 = DBUS_TYPE_UINT64;
static const int GW_DBUS_TYPE_DOUBLE = DBUS_TYPE_DOUBLE;
static const int GW_DBUS_TYPE_STRING = DBUS_TYPE_STRING;
static const int GW_DBUS_TYPE_OBJECT_PATH = DBUS_TYPE_OBJECT_PATH;
static const int GW_DBUS_TYPE_SIGNATURE = DBUS_TYPE_SIGNATURE;
static const int GW_DBUS_TYPE_UNIX_FD = DBUS_TYPE_UNIX_FD;
static const int GW_DBUS_TYPE_ARRAY = DBUS_TYPE_ARRAY;
static const int GW_DBUS_TYPE_VARIANT = DBUS_TYPE_VARIANT;
static const int GW_DBUS_TYPE_STRUCT = DBUS_TYPE_STRUCT;
static const int GW_DBUS_TYPE_DICT_ENTRY = DBUS_TYPE_DICT_ENTRY;

static const int GW_DBUS_MESSAGE_TYPE_METHOD_CALL = DBUS_MESSAGE_TYPE_METHOD_CALL;
static const int GW_DBUS_MESSAGE_TYPE_METHOD_RETURN = DBUS_MESSAGE_TYPE_METHOD_RETURN;
static const int GW_DBUS_MESSAGE_TYPE_ERROR = DBUS_MESSAGE_TYPE_ERROR;
static const int GW_DBUS_MESSAGE_TYPE_SIGNAL = DBUS_MESSAGE_TYPE_SIGNAL;

static const unsigned int GW_DBUS_WATCH_READABLE = DBUS_WATCH_READABLE;
static const unsigned int GW_DBUS_WATCH_WRITABLE = DBUS_WATCH_WRITABLE;
static const unsigned int GW_DBUS_WATCH_ERROR = DBUS_WATCH_ERROR;
static const unsigned int GW_DBUS_WATCH_HANGUP = DBUS_WATCH_HANGUP;

static const int GW_DBUS_NAME_FLAG_DO_NOT_QUEUE = DBUS_NAME_FLAG_DO_NOT_QUEUE;
static const int GW_DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER = DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER;

/// A zeroed DBusError (DBUS_ERROR_INIT is a macro).
static inline DBusError gw_dbus_error_init(void) {
    DBusError e;
    dbus_error_init(&e);
    return e;
}

/// Starts argv[0] (looked up in PATH) as a child that the kernel kills (SIGKILL) when the calling
/// *thread* ends (PR_SET_PDEATHSIG follows the thread that forked, not the process): called from
/// a thread that lives until the child has exited, the child cannot outlive this process however
/// it ends. The child's stdout is a pipe whose read end is stored in *output, its stderr
/// /dev/null; it starts with no signal blocked or ignored and no descriptor above 2. fork and
/// exec, as posix_spawn cannot set the parent-death signal and Swift cannot run code between
/// them; the child makes only async-signal-safe calls. Returns the child's pid, or -errno of
/// what failed (the exec's is reported through a close-on-exec pipe). pipe2 and close_range
/// through syscall(): Swift's Glibc module leaves out _GNU_SOURCE, which their declarations need.
static inline pid_t gw_spawn_tied(char *const argv[], int *output) {
    int out[2], report[2];
    if (syscall(SYS_pipe2, out, O_CLOEXEC) != 0) return -errno;
    if (syscall(SYS_pipe2, report, O_CLOEXEC) != 0) {
        int e = errno;
        close(out[0]);
        close(out[1]);
        return -e;
    }
    pid_t parent = getpid();
    pid_t child = fork();
    if (child == 0) {
        int e = 0;
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) e = errno;
        // The parent ended before prctl: nothing would kill this child any more.
        else if (getppid() != parent) _exit(127);
        if (e == 0) {
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            for (int s = 1; s < 32; s++)
                if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
            int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
            if (null < 0 || dup2(out[1], 1) < 0 || dup2(null, 2) < 0) e = errno;
        }
        if (e == 0) {
            // dup2 onto itself keeps close-on-exec (a parent started without stdout).
            fcntl(1, F_SETFD, 0);
            fcntl(2, F_SETFD, 0);
            // Nothing else of the parent's (sockets of its servers) stays open in the daemon.
            syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC);
            execvp(argv[0], argv);
            e = errno;
        }
        while (write(report[1], &e, sizeof e) < 0 && errno == EINTR) {}
        _exit(127);
    }
    int e = child < 0 ? errno : 0;
    close(out[1]);
    close(report[1]);
    if (child > 0) {
        ssize_t n;
        while ((n = read(report[0], &e, sizeof e)) < 0 && errno == EINTR) {}
        if (n == sizeof e) waitpid(child, NULL, 0);
        else e = 0;
    }
    close(report[0]);
    if (e != 0) {
        close(out[0]);
        return -e;
    }
    *output = out[0];
    return child;
}

#endif
