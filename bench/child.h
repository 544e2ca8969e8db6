// Child processes for a benchmark that runs itself again in several roles:
// this program with other arguments and extra environment, its stdout read
// back through a pipe, optionally its stdin kept open as a stop signal.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace bench {

inline std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "/proc/self/exe";
}

// A child: this program again with `args`, extra environment `env`, stdout to a pipe.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
};
// `ns`: a network namespace to run it in (through `ip netns exec`), or "".
inline Child spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
                   bool keep_stdin_pipe, int* stdin_fd, const std::string& ns = "") {
  int o[2], i[2] = {-1, -1};
  if (pipe2(o, O_CLOEXEC) != 0 || (keep_stdin_pipe && pipe2(i, O_CLOEXEC) != 0)) exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, o[1], 1);
  if (keep_stdin_pipe) posix_spawn_file_actions_adddup2(&fa, i[0], 0);
  std::vector<std::string> all;
  if (!ns.empty()) all = {"/usr/sbin/ip", "netns", "exec", ns};
  all.push_back(self_exe());
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** p = environ; *p; ++p) envs.push_back(*p);
  for (auto& x : env) envs.push_back(x);
  for (auto& x : envs) envp.push_back(const_cast<char*>(x.c_str()));
  envp.push_back(nullptr);
  Child c;
  if (posix_spawn(&c.pid, all[0].c_str(), &fa, nullptr, argv.data(), envp.data()) != 0) exit(1);
  posix_spawn_file_actions_destroy(&fa);
  close(o[1]);
  c.out = fdopen(o[0], "r");
  if (keep_stdin_pipe) {
    close(i[0]);
    *stdin_fd = i[1];
  }
  return c;
}

inline std::string read_all(Child& c) {
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), c.out)) > 0) s.append(buf, n);
  fclose(c.out);
  int st = 0;
  waitpid(c.pid, &st, 0);
  return s;
}

}  // namespace bench
