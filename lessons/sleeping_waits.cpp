#include "sleeping_waits.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace tp::lesson {

void quiet_barrier(Device& dev, Communicator& sync) {
  Tensor one = Tensor::from_host(dev, Shape{1}, {1.0f});
  std::unique_ptr<Work> work = sync.all_reduce_async(one);
  while (!work->test()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void SleepingWaits::nap(std::unique_ptr<Work> work) {
  std::chrono::microseconds pause(10);
  while (!work->test()) {
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

}  // namespace tp::lesson
