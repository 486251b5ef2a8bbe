"""CPU-seconds (user+system, since each process started) of the stack's and the services'
processes, by component; run while they are up."""
import json, os, sys
tick = os.sysconf("SC_CLK_TCK")
out = {}
cmds = {}
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            cmds[pid] = (open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(),
                         open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            pass
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    cpu = (int(stat[11]) + int(stat[12])) / tick
    if "kafka.Kafka" in cmd:
        name = "kafka-controllers" if "/controller" in cmd else "kafka-brokers"
    elif "CassandraDaemon" in cmd:
        name = "cassandra"
    elif "postgres" in cmd.split(" ")[0] or cmd.startswith("postgres:"):
        name = "postgres"
    elif " -m services." in cmd and "supervise" not in cmd:
        name = cmd.split(" -m ")[1].split()[0]
    elif "multiprocessing" in cmd and " -m services.api" in cmds.get(stat[1], ("", ""))[0]:
        name = "services.api"
    elif "prometheus" in cmd.split(" ")[0]:
        name = "prometheus"
    else:
        continue
    out[name] = round(out.get(name, 0) + cpu, 1)
json.dump(out, sys.stdout)
