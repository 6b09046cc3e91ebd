# lib.sh: helpers the bench scripts share; source it from bench/*.sh.

# freeport prints a free loopback TCP port.
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# ticks PID prints the CPU time PID has used (utime + stime), in clock ticks
# (getconf CLK_TCK per second).
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# redis_cpu_at PORT prints the CPU seconds the Redis on PORT has used
# (INFO cpu: used_cpu_sys + used_cpu_user).
redis_cpu_at() { redis-cli -p "$1" info cpu | awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f", s}'; }
