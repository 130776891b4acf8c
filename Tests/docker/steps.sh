# For the container tests (Tests/docker/run.sh, Tests/packaging/run.sh), sourced from the
# repository's top (`source Tests/docker/steps.sh NAME`): a scratch directory `work`
# (/tmp/NAME.XXXXXX), `lab` (../shared/dockerlab), named steps with their timings, a failure
# that names its step, an exit trap, bounded waits, a free port, the docker engine.
repo=$PWD
lab="$(dirname "$repo")/shared/dockerlab"
work=$(mktemp -d "/tmp/$1.XXXXXX")
now() { date +%s%3N; }   # milliseconds
since() { local ms=$(( $(now) - $1 )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
t_run=$(now) t_step="" step_name="" failed_step=""
declare -a timings=()
end_step() { [ -z "$step_name" ] || timings+=("$(printf '%6ss  %s' "$(since "$t_step")" "$step_name")"); }
step() { end_step; step_name=$1 t_step=$(now); printf '\n== %s (%s)\n' "$1" "$(date +%T)"; }
fail() { failed_step=$step_name; echo "FAIL: $*" >&2; exit 1; }
# At exit: after a failure, the step and what the caller's `show_failure` prints; always the
# caller's `tidy_up` (containers, processes) and the scratch directory; the exit status kept.
on_exit() {
    local rc=$?
    trap - EXIT
    set +e
    if [ "$rc" -ne 0 ]; then
        echo "--- failed in step: ${failed_step:-$step_name}"
        show_failure
    fi
    tidy_up
    rm -rf "$work"
    exit "$rc"
}
trap on_exit EXIT
# The steps' times and the total, after the last step.
print_timings() {
    end_step
    step_name=""
    printf '\n== timings\n'
    printf '%s\n' "${timings[@]}"
    printf '%6ss  total\n' "$(since "$t_run")"
}

# `wait_for SECONDS CMD...`: polls CMD every 0.2 s until it succeeds (readiness only).
wait_for() {
    local deadline=$(( $(now) + $1 * 1000 )); shift
    until "$@"; do
        (( $(now) > deadline )) && return 1
        sleep 0.2
    done
}
# The first port from $1 up that nothing on loopback answers.
free_port() {
    local port=$1
    while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
    echo "$port"
}

# A docker engine: dockerlab's (started if need be, left running for later runs), or any that answers.
start_docker() {
    step "docker engine"
    if [ -f "$lab/start" ]; then
        bash "$lab/start" > "$work/lab.log" 2>&1 || { cat "$work/lab.log"; fail "dockerlab start"; }
        grep -E '^dockerlab ready' "$work/lab.log" || true
    elif ! docker info >/dev/null 2>&1; then
        fail "no docker engine, and no $lab/start"
    fi
}
