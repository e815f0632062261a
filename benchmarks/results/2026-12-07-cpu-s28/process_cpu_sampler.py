"""Every process's CPU seconds while a command runs: /proc/<pid>/stat read every 0.25 s,
the highest utime+stime seen per (pid, start time), with its command line; written to
/tmp/sampler.json when STOPFILE appears. A process shorter than 0.25 s may be missed, and
one's last 0.25 s is lost; forked children show their parent's command line.

    python process_cpu_sampler.py STOPFILE & <command>; touch STOPFILE
"""
import os, time, sys, json
out = {}
clk = os.sysconf('SC_CLK_TCK')
stop = sys.argv[1]
while not os.path.exists(stop):
    for pid in os.listdir('/proc'):
        if not pid.isdigit(): continue
        try:
            with open(f'/proc/{pid}/stat') as f: st = f.read()
            with open(f'/proc/{pid}/cmdline','rb') as f: cmd = f.read().replace(b'\0', b' ').decode(errors='replace')[:200]
        except OSError: continue
        rp = st.rindex(')'); fields = st[rp+2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / clk
        start = fields[19]
        key = pid + ':' + start
        prev = out.get(key)
        if prev is None or cpu > prev[0]: out[key] = (cpu, cmd or st[st.index('(')+1:rp])
    time.sleep(0.25)
json.dump(out, open('/tmp/sampler.json', 'w'))
