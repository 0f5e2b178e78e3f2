// test_life_line_mpi.cpp — the ranks' life lines to the node's watchdog (launcher/life_line.h): a line
// ends when its process does, and a fatal-signal handler can tell a peer that has ended or is
// ending from one that runs (MPI binary: the launcher library; each rank tests on its own).
#include "life_line.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

namespace {

TEST(LifeLine, EndsWhenItsProcessEnds) {
  char name[48] = {};
  const int listener = tp::life_line::listen_for(2, name, sizeof name);
  ASSERT_GE(listener, 0);
  int connected[2];
  ASSERT_EQ(::pipe(connected), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    const char ok = tp::life_line::connect_to(name, 1) >= 0 ? 'y' : 'n';
    if (::write(connected[1], &ok, 1) != 1) std::_Exit(1);
    ::pause();  // until killed: its line must end then
    std::_Exit(0);
  }
  ASSERT_GT(child, 0);
  char ok = 0;  // as the ranks do, the line is connected before the watchdog accepts
  ASSERT_EQ(::read(connected[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  pollfd lines[2] = {{-1, 0, 0}, {-1, 0, 0}};
  ASSERT_EQ(tp::life_line::accept_all(listener, lines, 2), 1);
  EXPECT_EQ(lines[0].fd, -1);
  ASSERT_GE(lines[1].fd, 0);  // under the index the child sent
  EXPECT_EQ(::poll(&lines[1], 1, 0), 0) << "the line of a running process reads as ended";
  EXPECT_FALSE(tp::life_line::process_ending(child));
  ::kill(child, SIGKILL);
  ASSERT_EQ(::poll(&lines[1], 1, 5000), 1);
  EXPECT_TRUE(tp::life_line::ended(lines[1].fd));
  EXPECT_TRUE(tp::life_line::process_ending(child));  // a zombie until reaped
  ::waitpid(child, nullptr, 0);
  EXPECT_TRUE(tp::life_line::process_ending(child));  // gone
  ::close(lines[1].fd);
  ::close(connected[0]);
  ::close(connected[1]);
}

TEST(LifeLine, ThisProcessIsNotEnding) {
  EXPECT_FALSE(tp::life_line::process_ending(static_cast<int>(::getpid())));
  EXPECT_EQ(tp::life_line::connect_to("", 0), -1);  // no watchdog: no line, no error
}

}  // namespace
